"""gRPC adapter over the renderer: request protos in, token lists out."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import grpc

from turnpike.grpc_param import param_metadata
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


class TokenizerServicer(tokenizer_pb2_grpc.TokenizerServicer):
    def __init__(self, renderer: Renderer, max_chars: int = DEFAULT_MAX_CHARS) -> None:
        self._renderer = renderer
        self._max_chars = max_chars

    async def _run(
        self, size: int, context: grpc.aio.ServicerContext, fn: Callable[..., T], *args: object
    ) -> T:
        if size > self._max_chars:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"The input holds {size} characters of text, over the tokenizer's limit "
                f"of {self._max_chars}.",
            )
        try:
            if size <= INLINE_MAX_CHARS:
                return fn(*args)
            return await asyncio.to_thread(fn, *args)
        except RenderError as exc:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, str(exc), param_metadata(exc.param)
            )
            raise  # unreachable: abort raises

    async def Render(
        self, request: tokenizer_pb2.RenderRequest, context: grpc.aio.ServicerContext
    ) -> tokenizer_pb2.RenderResponse:
        size = text_size(request.instructions, request.tools, request.items)
        tokens = await self._run(
            size, context, self._renderer.render, request.instructions, request.tools, request.items
        )
        metrics.FULL.record(len(tokens))
        return tokenizer_pb2.RenderResponse(
            tokens=tokens, completion_prompt=self._renderer.completion_prompt
        )

    async def RenderAppend(
        self, request: tokenizer_pb2.RenderAppendRequest, context: grpc.aio.ServicerContext
    ) -> tokenizer_pb2.RenderResponse:
        size = text_size("", (), request.items)
        tokens = await self._run(size, context, self._renderer.render_append, request.items)
        metrics.APPEND.record(len(tokens))
        return tokenizer_pb2.RenderResponse(
            tokens=tokens, completion_prompt=self._renderer.completion_prompt
        )

    async def CountText(
        self, request: tokenizer_pb2.CountTextRequest, context: grpc.aio.ServicerContext
    ) -> tokenizer_pb2.CountTextResponse:
        count = await self._run(len(request.text), context, self._renderer.count_text, request.text)
        return tokenizer_pb2.CountTextResponse(tokens=count)
