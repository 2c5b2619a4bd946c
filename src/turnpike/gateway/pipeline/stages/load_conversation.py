"""``load_conversation``: the response a follow-up names (``previous_response_id``), or
the stored conversation it continues (``conversation``); either with the request's input
within the conversation bounds (``turnpike.gateway.state.conversation_bounds``), checked here, before any
backend sees the conversation."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from turnpike.gateway.pipeline.prepared import Parent, Prepared
from turnpike.gateway.pipeline.stages.base import Resources, Stage
from turnpike.gateway.protocol.errors import echo, invalid, not_found
from turnpike.gateway.protocol.items import to_proto
from turnpike.gateway.state.conversation_bounds import check_turn
from turnpike.gateway.state.conversation_state import ConversationState
from turnpike.gateway.state.conversations import ConversationStore
from turnpike.gateway.state.responses import ResponseStore, history_of, load_chain
from turnpike.gateway.state.token_cache import TokenCache


@dataclass(frozen=True)
class LoadConversation(Stage):
    name: ClassVar[str] = "load_conversation"
    inputs: ClassVar[frozenset[str]] = frozenset({"request", "ctx"})
    output: ClassVar[str] = "parent"
    # Continue from the connection-scoped cache when it holds the parent (else the store).
    from_connection: bool = False
    # Take the parent's rendered tokens from the process's TokenCache.
    rendered_tokens: bool = False

    def applies(self, p: Prepared) -> bool:
        return bool(p.request.previous_response_id or p.request.conversation)

    async def run(self, p: Prepared, res: Resources) -> Parent:
        parent = await self._load(p, res)
        request, state = p.request, parent.state
        param = "conversation" if request.conversation else "previous_response_id"
        name = request.conversation or request.previous_response_id or ""
        # The bounds of stored conversations hold for a chain of responses too.
        bounds = res.conversations.bounds
        size = check_turn(
            bounds, state.history, state.history_bytes, request.input_items, param, name
        )
        if state.history_bytes is None:  # measured once: the next state adds to it
            parent = replace(parent, state=replace(state, history_bytes=size))
        return parent

    async def _load(self, p: Prepared, res: Resources) -> Parent:
        if p.request.conversation:
            return Parent(
                await load_stored_conversation(
                    res.conversations, p.ctx.tenant, p.request.conversation
                )
            )
        previous_id = p.request.previous_response_id
        assert previous_id
        cache = p.ctx.connection_cache
        if self.from_connection and cache is not None:
            state = cache.get(previous_id)
            if state is not None:
                return Parent(state, from_connection_cache=True)
        token_cache = res.token_cache if self.rendered_tokens else None
        return Parent(await load_parent(res.store, p.ctx.tenant, previous_id, token_cache))


async def load_parent(
    store: ResponseStore, tenant: str, previous_id: str, token_cache: TokenCache | None = None
) -> ConversationState:
    """The conversation through ``previous_id``, rebuilt from the store (with its rendered
    tokens when ``token_cache`` holds them), or the API's not-found error."""
    chain = await load_chain(store, tenant, previous_id)
    if chain is None:
        raise invalid(
            f"Previous response with id {echo(previous_id)} not found.",
            "previous_response_id",
            "previous_response_not_found",
        )
    history = history_of(chain)
    call_names: dict[str, str] = {}
    return ConversationState(
        response=chain[-1].response,
        history=history,
        proto_history=to_proto(history, call_names),
        call_names=call_names,
        conversation_id=chain[0].id,
        affinity_key=chain[-1].affinity_key or chain[0].id,
        rendered=token_cache.get(tenant, previous_id) if token_cache is not None else None,
    )


async def load_stored_conversation(
    conversations: ConversationStore, tenant: str, conversation_id: str
) -> ConversationState:
    """A stored conversation's items as the history a turn continues, or the API's
    not-found error. It keys its safety state and routing itself."""
    history = await conversations.items(tenant, conversation_id)
    if history is None:
        raise not_found(
            f"Conversation with id {echo(conversation_id)} not found.",
            "conversation",
            "conversation_not_found",
        )
    call_names: dict[str, str] = {}
    return ConversationState(
        response={},
        history=history,
        proto_history=to_proto(history, call_names),
        call_names=call_names,
        conversation_id=conversation_id,
        affinity_key=conversation_id,
    )
