"""The endpoints that read a conversation without generating: the prompt tokens a
request would have (``input_tokens``), its history compacted (``compact``), and the
input items a stored response was generated from (``input_items``)."""

from __future__ import annotations

from turnpike.backend_names import OPENAI_COMPATIBLE
from turnpike.gateway.engine.preparation import open_sealed
from turnpike.gateway.pipeline.stages import Resources
from turnpike.gateway.pipeline.stages.load_conversation import load_parent, load_stored_conversation
from turnpike.gateway.pipeline.stages.render import render_all
from turnpike.gateway.pipeline.stages.resolve_images import image_tokens
from turnpike.gateway.pipeline.stages.resolve_model import resolve_model
from turnpike.gateway.pipeline.stages.validate_history import join_conversation
from turnpike.gateway.protocol.errors import invalid
from turnpike.gateway.protocol.items import Item
from turnpike.gateway.protocol.request import CreateRequest
from turnpike.gateway.sealed import compaction
from turnpike.gateway.state.responses import history_of, load_chain
from turnpike.gateway.upstream.pdf_text import read_pdfs


class ConversationReads:
    def __init__(self, res: Resources) -> None:
        self.res = res

    async def count_input_tokens(self, request: CreateRequest, tenant: str) -> int:
        """The prompt tokens ``request`` would have: its conversation rendered in full,
        and its images (as generation and billing count them). A model served by an
        OpenAI-compatible server is refused: that server's tokenizer and chat template
        make its prompt, which Turnpike's renderer does not know (its usage carries the
        server's counts)."""
        model = self.res.model_cache.get(request.model) or await resolve_model(
            self.res, request.model
        )
        if model.backend == OPENAI_COMPATIBLE:
            raise invalid(
                f"Input tokens of {model.id!r} are counted by the server that serves it (its "
                "own tokenizer and chat template), not by this gateway; the usage of its "
                "responses carries that server's counts.",
                "model",
                "unsupported_model",
            )
        return (await self._full_conversation(request, tenant))[1]

    async def compact(self, request: CreateRequest, tenant: str) -> tuple[list[Item], int]:
        """``POST /v1/responses/compact``: the request's whole history (its parent's and
        its input) compacted (``turnpike.gateway.sealed.compaction``), and the prompt tokens it renders to."""
        items, tokens = await self._full_conversation(request, tenant)
        return compaction.compact(self.res.sealer, tenant, items), tokens

    async def input_items(self, tenant: str, response_id: str) -> list[Item] | None:
        """Every input item the response was generated from, oldest first."""
        chain = await load_chain(self.res.store, tenant, response_id)
        if chain is None:
            # An ancestor was deleted: what is left is this response's own input.
            record = await self.res.store.get(tenant, response_id)
            return None if record is None else list(record.input_items)
        return [*history_of(chain[:-1]), *chain[-1].input_items]

    async def _full_conversation(
        self, request: CreateRequest, tenant: str
    ) -> tuple[list[Item], int]:
        """Every item of the request's conversation (its parent's, then its input,
        compaction items expanded) and the prompt tokens they render to."""
        open_sealed(self.res, request, tenant)
        await read_pdfs(request.input_items, self.res.pdf)
        parent = None
        if request.previous_response_id:
            parent = await load_parent(self.res.store, tenant, request.previous_response_id)
        elif request.conversation:
            parent = await load_stored_conversation(
                self.res.conversations, tenant, request.conversation
            )
        conversation = join_conversation(parent, request, tenant, response_id="")
        rendered = await render_all(self.res, request, conversation.items)
        images = await image_tokens(conversation.items, self.res.image_limits)
        history = parent.history if parent is not None else []
        return [*history, *request.input_items], len(rendered.prompt()) + images
