"""``render``: the conversation as prompt tokens, by the tokenizer service."""

from __future__ import annotations

from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import ClassVar

import grpc

from turnpike import token_bytes
from turnpike.conversation.v1 import conversation_pb2
from turnpike.gateway.metrics import SESSION_EXCHANGES
from turnpike.gateway.pipeline.prepared import Prepared, Prompt
from turnpike.gateway.pipeline.stages.base import Resources, Stage, streams_of
from turnpike.gateway.pipeline.stages.keys import content_keys
from turnpike.gateway.protocol import truncation
from turnpike.gateway.protocol.errors import invalid
from turnpike.gateway.protocol.request import CreateRequest
from turnpike.gateway.state.conversation_state import RenderedPrefix
from turnpike.gateway.upstream.session_stream import StreamBroken
from turnpike.gateway.upstream.sessions import ConnectionStreams, refusal_error
from turnpike.grpc_param import refused_param
from turnpike.tokenizer.v1 import tokenizer_pb2

# The tokenizer refuses input it cannot render, or too much of it: the client's to fix.
# A refusal names the field at fault when it knows it: the tools it is sent are the
# request's, in order, so its ``tools[i]`` are the API's.
RENDER_ERRORS = {
    grpc.StatusCode.INVALID_ARGUMENT: lambda err: invalid(
        err.details() or "The input could not be rendered.", refused_param(err, "input")
    ),
    grpc.StatusCode.RESOURCE_EXHAUSTED: lambda err: invalid(
        err.details() or "The input is too large to render.", "input", "input_too_large"
    ),
}


@dataclass(frozen=True)
class Render(Stage):
    name: ClassVar[str] = "render"
    inputs: ClassVar[frozenset[str]] = frozenset(
        {"request", "ctx", "parent", "conversation", "model"}
    )
    output: ClassVar[str] = "prompt"
    # Render only the new items and append them to the parent's cached tokens.
    append: bool = False
    # Without a parent (a client re-sending its whole history), look the longest rendered
    # prefix up by content in the process's TokenCache, and keep this render there too.
    by_content: bool = False
    # Ask on the client connection's session stream (turnpike.gateway.upstream.sessions),
    # when it has one; by a call otherwise, or when the stream breaks.
    session: bool = False

    async def run(self, p: Prepared, res: Resources) -> Prompt:
        request, conversation = p.request, p.conversation
        assert conversation is not None
        cached = p.parent.state.rendered if p.parent is not None else None
        keys = []
        if self.by_content and p.parent is None:
            keys = content_keys(request.header_key, conversation.items)
            cached = res.token_cache.longest(p.ctx.tenant, keys)
        streams = streams_of(p, res) if self.session else None
        base = None
        if self.append and cached is not None and cached.header_key == request.header_key:
            rendered = await render_after(res, cached, conversation.items, streams)
            base = cached
        else:
            rendered = await render_all(res, request, conversation.items, streams)
        if keys:
            res.token_cache.put(p.ctx.tenant, keys[-1], rendered)
        prompt = Prompt(rendered, rendered.prompt(), base=base)
        assert p.model is not None
        # A compaction_trigger seals the whole history and generates nothing: no truncation.
        over = len(prompt.tokens) > p.model.context_window
        if request.truncation == "auto" and over and not request.compact_now:
            return await truncated(res, request, conversation.items, prompt, p.model.context_window)
        return prompt

    def check(self, p: Prepared) -> None:
        assert p.prompt is not None and p.model is not None
        size, window = len(p.prompt.tokens), p.model.context_window
        if size > window and not p.request.compact_now:  # compacting is how to get under it
            raise invalid(
                f"Your input is {size} tokens, over the model's context window of {window}.",
                "input",
                "context_length_exceeded",
            )


async def truncated(
    res: Resources,
    request: CreateRequest,
    items: list[conversation_pb2.Item],
    full: Prompt,
    window: int,
) -> Prompt:
    """The prompt with the fewest oldest items dropped that fits ``window``
    (``turnpike.gateway.protocol.truncation``); the full prompt when none does (``check`` refuses it)."""
    plan = truncation.plan(items)
    fitted: dict[int, RenderedPrefix] = {}

    async def fits(count: int) -> bool:
        rendered = await render_all(res, request, plan.dropping(count)[0])
        fitted[count] = rendered
        return len(rendered.prompt()) <= window

    count = await truncation.smallest_fit(plan.max_drop, fits)
    if count is None:
        return full
    kept, dropped = plan.dropping(count)
    rendered = fitted[count]
    return Prompt(rendered, rendered.prompt(), kept, tuple(dropped), len(full.tokens))


async def render_all(
    res: Resources,
    request: CreateRequest,
    items: list[conversation_pb2.Item],
    streams: ConnectionStreams | None = None,
) -> RenderedPrefix:
    """Instructions, tools and every item."""
    message = tokenizer_pb2.RenderRequest(
        instructions=request.instructions or "", tools=request.proto_tools, items=items, packed=True
    )
    reply = await _rendered(
        res,
        streams,
        tokenizer_pb2.RenderSessionRequest(full=message),
        res.backends.tokenizer.Render,
        message,
    )
    tokens, completion_prompt = _tokens_of(reply)
    return RenderedPrefix(request.header_key, tokens, len(items), completion_prompt)


async def render_after(
    res: Resources,
    cached: RenderedPrefix,
    items: list[conversation_pb2.Item],
    streams: ConnectionStreams | None = None,
) -> RenderedPrefix:
    """The items after a rendered prefix, appended to its tokens."""
    tail = items[cached.items :]
    if not tail:  # the same history, re-sent
        return cached
    message = tokenizer_pb2.RenderAppendRequest(items=tail, packed=True)
    reply = await _rendered(
        res,
        streams,
        tokenizer_pb2.RenderSessionRequest(append=message),
        res.backends.tokenizer.RenderAppend,
        message,
    )
    tokens, completion_prompt = _tokens_of(reply)
    return RenderedPrefix(cached.header_key, cached.tokens + tokens, len(items), completion_prompt)


def _tokens_of(reply: tokenizer_pb2.RenderResponse) -> tuple[array, array]:
    """The render's tokens and completion prompt: packed, as asked, unless the
    tokenizer predates packing (it then sends the repeated fields)."""
    if reply.packed_completion_prompt:  # never empty when packed: it opens a turn
        return token_bytes.unpack(reply.packed_tokens), token_bytes.unpack(
            reply.packed_completion_prompt
        )
    return array("I", reply.tokens), array("I", reply.completion_prompt)


async def _rendered(
    res: Resources,
    streams: ConnectionStreams | None,
    on_stream: tokenizer_pb2.RenderSessionRequest,
    method: Callable[..., Awaitable[tokenizer_pb2.RenderResponse]],
    message: tokenizer_pb2.RenderRequest | tokenizer_pb2.RenderAppendRequest,
) -> tokenizer_pb2.RenderResponse:
    """The render, asked on the connection's session stream when it has one; by a call
    when it has none or the stream broke. A refusal on the stream is the error the call
    would have failed with."""
    if streams is not None:
        try:
            reply = (await streams.tokenizer.exchange(on_stream)).reply
        except StreamBroken:
            SESSION_EXCHANGES.labels("tokenizer", "broken").inc()
        else:
            if reply.HasField("refusal"):
                SESSION_EXCHANGES.labels("tokenizer", "refused").inc()
                raise refusal_error("tokenizer", reply.refusal, RENDER_ERRORS)
            SESSION_EXCHANGES.labels("tokenizer", "ok").inc()
            return reply.response
    return await res.backends.call("tokenizer", method, message, RENDER_ERRORS)
