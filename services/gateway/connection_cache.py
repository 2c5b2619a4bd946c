"""The connection-scoped cache of WebSocket mode: the recent responses of one
connection, by id, each with what a follow-up needs (``ConversationState``)."""

from __future__ import annotations

from collections import OrderedDict

from gateway.conversation_state import ConversationState


class ConnectionCache:
    """Least recently used responses leave first once ``capacity`` are held."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._states: OrderedDict[str, ConversationState] = OrderedDict()

    def get(self, response_id: str) -> ConversationState | None:
        state = self._states.get(response_id)
        if state is not None:
            self._states.move_to_end(response_id)
        return state

    def put(self, response_id: str, state: ConversationState) -> None:
        self._states[response_id] = state
        self._states.move_to_end(response_id)
        while len(self._states) > self._capacity:
            self._states.popitem(last=False)

    def evict_after_failure(self, parent_id: str, lane: str | None) -> None:
        """A failed continuation on the parent's own lane evicts the parent (what the
        client sends next may not match it); a failed fork from another lane leaves it
        for its source lane."""
        parent = self._states.get(parent_id)
        if parent is not None and parent.lane == lane:
            del self._states[parent_id]

    def __len__(self) -> int:
        return len(self._states)
