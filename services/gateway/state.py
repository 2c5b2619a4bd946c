"""What a follow-up needs of the response it continues, and the
connection-scoped cache that holds it on a WebSocket."""

from __future__ import annotations

from array import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from turnpike.conversation.v1 import conversation_pb2
from turnpike.router.v1 import router_pb2

from gateway.items import Item


@dataclass(frozen=True)
class RenderedPrefix:
    """Tokens of a conversation's first ``items`` items, under one header."""

    header_key: str  # instructions and tools the tokens were rendered with
    tokens: array  # array("I"): 4 bytes a token, shared, never changed in place
    items: int


@dataclass
class ConversationState:
    response: dict[str, Any]
    history: list[Item]  # every item through the response's output
    proto_history: list[conversation_pb2.Item]  # the same, flattened for backends
    call_names: dict[str, str]  # call_id -> function name
    conversation_id: str  # the conversation's first response: keys its safety state
    affinity_key: str  # keys routing: a conversation stays where its prefix cache is
    rendered: RenderedPrefix | None = None
    model: router_pb2.ModelConfig | None = None
    route: router_pb2.RouteDecision | None = None
    from_cache: bool = field(default=False, compare=False)
    lane: str | None = None  # the WebSocket lane that produced it
    image_tokens: int = 0  # of the resolved images in ``history``


class ConnectionCache:
    """Recent responses of one connection, by id; least recently used go first."""

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

    def evict(self, response_id: str) -> None:
        self._states.pop(response_id, None)

    def evict_after_failure(self, parent_id: str, lane: str | None) -> None:
        """A failed continuation on the parent's own lane evicts the parent; a
        failed fork from another lane leaves it for its source lane."""
        parent = self._states.get(parent_id)
        if parent is not None and parent.lane == lane:
            del self._states[parent_id]

    def __len__(self) -> int:
        return len(self._states)
