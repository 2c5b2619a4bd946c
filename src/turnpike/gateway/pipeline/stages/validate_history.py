"""``validate_history``: the conversation passes the request validators and every tool
output answers a call made before it; the new items then join the conversation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from turnpike.gateway.pipeline.prepared import Conversation, Prepared
from turnpike.gateway.pipeline.stages.base import Resources, Stage
from turnpike.gateway.pipeline.stages.keys import conversation_key
from turnpike.gateway.protocol.items import check_call_outputs, normalize_input, to_proto
from turnpike.gateway.protocol.request import CreateRequest
from turnpike.gateway.state.conversation_state import ConversationState


@dataclass(frozen=True)
class ValidateHistory(Stage):
    name: ClassVar[str] = "validate_history"
    inputs: ClassVar[frozenset[str]] = frozenset({"request", "ctx", "response_id", "parent"})
    output: ClassVar[str] = "conversation"
    # Continuing from the connection cache, validate only the new input (parsing the
    # request already did). Otherwise the rebuilt history goes through the validators
    # again, as a stateless server validates the whole input it assembled.
    incremental: bool = False

    async def run(self, p: Prepared, res: Resources) -> Conversation:
        parent = p.parent
        if parent is not None and not (self.incremental and parent.from_connection_cache):
            normalize_input(parent.state.history, "previous_response_id")
        return join_conversation(
            parent.state if parent else None, p.request, p.ctx.tenant, p.response_id
        )


def join_conversation(
    parent: ConversationState | None, request: CreateRequest, tenant: str, response_id: str
) -> Conversation:
    """The request's input after its parent's conversation (raises when a tool output
    answers no call). A conversation without a parent starts at ``response_id``."""
    history = parent.history if parent else []
    check_call_outputs(history, request.input_items)
    call_names = dict(parent.call_names) if parent else {}
    new_items = to_proto(request.input_items, call_names)
    items = (parent.proto_history if parent else []) + new_items
    if parent is not None:
        conversation_id, affinity_key = parent.conversation_id, parent.affinity_key
    else:
        conversation_id = response_id
        affinity_key = conversation_key(tenant, request, new_items)
    return Conversation(history, call_names, new_items, items, conversation_id, affinity_key)
