"""What a follow-up needs of the response it continues: the conversation so far (as
items and as the backends' protos), its keys, and what earlier turns derived from it
(rendered tokens, model, worker). The connection cache keeps one per response."""

from __future__ import annotations

from array import array
from dataclasses import dataclass

from turnpike.conversation.v1 import conversation_pb2
from turnpike.gateway.protocol.items import Item
from turnpike.router.v1 import router_pb2


@dataclass(frozen=True)
class RenderedPrefix:
    """Tokens of a conversation's first ``items`` items, under one header."""

    header_key: str  # instructions and tools the tokens were rendered with
    tokens: array  # array("I"): 4 bytes a token, shared, never changed in place
    items: int
    # The tokens that open the assistant's turn, as the renderer gave them with these
    # tokens (they depend on the prompt format, so they travel with the render).
    completion_prompt: array

    def prompt(self) -> array:
        """The prompt a model generates from: the prefix, then the assistant's opening."""
        return self.tokens + self.completion_prompt


@dataclass(frozen=True)
class ConversationState:
    response: dict
    history: list[Item]  # every item through the response's output
    proto_history: list[conversation_pb2.Item]  # the same, flattened for backends
    call_names: dict[str, str]  # call_id -> function name
    conversation_id: str  # the conversation's first response: keys its safety state
    affinity_key: str  # keys routing: a conversation stays where its prefix cache is
    rendered: RenderedPrefix | None = None
    model: router_pb2.ModelConfig | None = None
    route: router_pb2.RouteDecision | None = None
    lane: str | None = None  # the WebSocket lane that produced it
    image_tokens: int = 0  # of the resolved images in ``history``
    # Bytes of ``history`` (conversation_bounds.items_bytes); None: not measured yet.
    history_bytes: int | None = None
