"""The connection-scoped cache of WebSocket mode: the recent responses of one
connection, by id, each with what a follow-up needs (``ConversationState``)."""

from __future__ import annotations

from turnpike.gateway.metrics import CacheLookups
from turnpike.gateway.state.conversation_state import ConversationState
from turnpike.lru import LruCache

LOOKUPS = CacheLookups("connection")


class ConnectionCache:
    """Least recently used responses leave first once ``capacity`` are held."""

    def __init__(self, capacity: int) -> None:
        self._states: LruCache[str, ConversationState] = LruCache(capacity)

    def get(self, response_id: str) -> ConversationState | None:
        state = self._states.get(response_id)
        LOOKUPS.count(state)
        return state

    def put(self, response_id: str, state: ConversationState) -> None:
        self._states.put(response_id, state)

    def evict_after_failure(self, parent_id: str, lane: str | None) -> None:
        """A failed continuation on the parent's own lane evicts the parent (what the
        client sends next may not match it); a failed fork from another lane leaves it
        for its source lane."""
        parent = self._states.peek(parent_id)
        if parent is not None and parent.lane == lane:
            self._states.pop(parent_id)

    def __len__(self) -> int:
        return len(self._states)
