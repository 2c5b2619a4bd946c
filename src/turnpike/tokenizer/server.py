"""gRPC adapter over the renderer: request protos in, token lists out, by calls or on a
client connection's session stream (``RenderSession``: the same renders, a message each
way instead of a call)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import grpc

from turnpike import token_bytes
from turnpike.grpc_param import param_metadata
from turnpike.session.v1 import session_pb2
from turnpike.session_server import Refused, SessionLimit, serve_session
from turnpike.tokenizer import metrics
from turnpike.tokenizer.render import Renderer, RenderError, text_size
from turnpike.tokenizer.v1 import tokenizer_pb2, tokenizer_pb2_grpc

T = TypeVar("T")

# Below this many characters a render takes well under a millisecond, less than the hop to a
# worker thread costs; above it, rendering moves off the event loop.
INLINE_MAX_CHARS = 8 * 1024
# Characters one request may hold (TURNPIKE_TOKENIZER_MAX_CHARS): its cost is checked
# before any of it is encoded.
DEFAULT_MAX_CHARS = 2 * 1024 * 1024
SERVICE = "turnpike.tokenizer.v1.Tokenizer"


class TokenizerServicer(tokenizer_pb2_grpc.TokenizerServicer):
    def __init__(
        self,
        renderer: Renderer,
        max_chars: int = DEFAULT_MAX_CHARS,
        sessions: SessionLimit | None = None,
    ) -> None:
        self._renderer = renderer
        self._packed_completion_prompt = token_bytes.pack(renderer.completion_prompt)
        self._max_chars = max_chars
        self._sessions = sessions or SessionLimit(4096)

    async def _run(self, size: int, fn: Callable[..., T], *args: object) -> T:
        """``fn(*args)``, inline when it is short; ``Refused`` for input over the bound or
        that cannot be rendered."""
        if size > self._max_chars:
            raise Refused(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"The input holds {size} characters of text, over the tokenizer's limit "
                f"of {self._max_chars}.",
            )
        try:
            if size <= INLINE_MAX_CHARS:
                return fn(*args)
            return await asyncio.to_thread(fn, *args)
        except RenderError as exc:
            raise Refused(grpc.StatusCode.INVALID_ARGUMENT, str(exc), exc.param) from None

    async def _render(self, request: tokenizer_pb2.RenderRequest) -> tokenizer_pb2.RenderResponse:
        size = text_size(request.instructions, request.tools, request.items)
        tokens = await self._run(
            size, self._renderer.render, request.instructions, request.tools, request.items
        )
        metrics.FULL.record(len(tokens))
        return self._response(tokens, request.packed)

    async def _render_append(
        self, request: tokenizer_pb2.RenderAppendRequest
    ) -> tokenizer_pb2.RenderResponse:
        size = text_size("", (), request.items)
        tokens = await self._run(size, self._renderer.render_append, request.items)
        metrics.APPEND.record(len(tokens))
        return self._response(tokens, request.packed)

    def _response(self, tokens: list[int], packed: bool) -> tokenizer_pb2.RenderResponse:
        if packed:
            return tokenizer_pb2.RenderResponse(
                packed_tokens=token_bytes.pack(tokens),
                packed_completion_prompt=self._packed_completion_prompt,
            )
        return tokenizer_pb2.RenderResponse(
            tokens=tokens, completion_prompt=self._renderer.completion_prompt
        )

    async def Render(
        self, request: tokenizer_pb2.RenderRequest, context: grpc.aio.ServicerContext
    ) -> tokenizer_pb2.RenderResponse:
        try:
            return await self._render(request)
        except Refused as exc:
            await _abort(context, exc)
            raise  # unreachable: abort raises

    async def RenderAppend(
        self, request: tokenizer_pb2.RenderAppendRequest, context: grpc.aio.ServicerContext
    ) -> tokenizer_pb2.RenderResponse:
        try:
            return await self._render_append(request)
        except Refused as exc:
            await _abort(context, exc)
            raise  # unreachable: abort raises

    async def RenderSession(
        self,
        requests: AsyncIterator[tokenizer_pb2.RenderSessionRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[tokenizer_pb2.RenderSessionReply]:
        async def answer(
            request: tokenizer_pb2.RenderSessionRequest,
        ) -> tokenizer_pb2.RenderSessionReply:
            kind = request.WhichOneof("render")
            if kind == "full":
                response = await self._render(request.full)
            elif kind == "append":
                response = await self._render_append(request.append)
            else:
                raise Refused(grpc.StatusCode.INVALID_ARGUMENT, "a request renders full or append")
            return tokenizer_pb2.RenderSessionReply(seq=request.seq, response=response)

        def refused(seq: int, refusal: session_pb2.Refusal) -> tokenizer_pb2.RenderSessionReply:
            return tokenizer_pb2.RenderSessionReply(seq=seq, refusal=refusal)

        async for reply in serve_session(
            requests, context, self._sessions, SERVICE, "RenderSession", answer, refused
        ):
            yield reply

    async def CountText(
        self, request: tokenizer_pb2.CountTextRequest, context: grpc.aio.ServicerContext
    ) -> tokenizer_pb2.CountTextResponse:
        try:
            count = await self._run(len(request.text), self._renderer.count_text, request.text)
        except Refused as exc:
            await _abort(context, exc)
            raise  # unreachable: abort raises
        return tokenizer_pb2.CountTextResponse(tokens=count)


async def _abort(context: grpc.aio.ServicerContext, refused: Refused) -> None:
    """End a call as ``refused`` says (the field at fault in its trailing metadata)."""
    await context.abort(refused.code, refused.message, param_metadata(refused.param))
