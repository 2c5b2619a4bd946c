"""The tokenizer as a real process over gRPC: render, append, count, errors, clean stop; and
in process, the metrics of what it renders."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from support.metric_samples import Delta
from support.procs import free_port, start_service

from turnpike.conversation.v1.conversation_pb2 import Item, Tool
from turnpike.grpc_client import insecure_channel, wait_healthy
from turnpike.tokenizer.render import Renderer
from turnpike.tokenizer.server import TokenizerServicer
from turnpike.tokenizer.v1 import tokenizer_pb2, tokenizer_pb2_grpc
from turnpike.vocab import harmony_encoding

SERVICE = "turnpike.tokenizer.v1.Tokenizer"

TOOLS = [
    Tool(
        name="get_weather",
        description="Current weather for a city.",
        parameters_json=json.dumps(
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
        ),
    )
]

ITEMS = [
    Item(kind=Item.MESSAGE, role="user", text="Weather in Paris and Oslo?"),
    Item(kind=Item.FUNCTION_CALL, call_id="c1", name="get_weather", arguments='{"city":"Paris"}'),
    Item(kind=Item.FUNCTION_CALL_OUTPUT, call_id="c1", name="get_weather", text='{"c": 21}'),
    Item(kind=Item.FUNCTION_CALL, call_id="c2", name="get_weather", arguments='{"city":"Oslo"}'),
    # A large output, so this render runs on a worker thread.
    Item(kind=Item.FUNCTION_CALL_OUTPUT, call_id="c2", name="get_weather", text="snow " * 5000),
    Item(kind=Item.MESSAGE, role="assistant", text="Paris 21C, Oslo snowing."),
]


class Tokenizer:
    def __init__(self) -> None:
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    async def start(self, **env: str) -> None:
        self.proc = start_service("tokenizer", {"TURNPIKE_TOKENIZER_PORT": str(self.port), **env})
        if not await wait_healthy(self.address, timeout=30.0, service=SERVICE):
            self.kill()
            pytest.fail("tokenizer did not become healthy")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def tokenizer() -> Iterator[Tokenizer]:
    svc = Tokenizer()
    yield svc
    svc.kill()


@pytest.fixture
async def stub(tokenizer: Tokenizer) -> AsyncIterator[tokenizer_pb2_grpc.TokenizerStub]:
    await tokenizer.start()
    async with insecure_channel(tokenizer.address) as channel:
        yield tokenizer_pb2_grpc.TokenizerStub(channel)


async def test_render_append_and_count(stub: tokenizer_pb2_grpc.TokenizerStub) -> None:
    enc = harmony_encoding()
    full = await stub.Render(
        tokenizer_pb2.RenderRequest(instructions="Be brief.", tools=TOOLS, items=ITEMS)
    )
    assert enc.decode_utf8(full.completion_prompt) == "<|start|>assistant"
    text = enc.decode_utf8(full.tokens)
    assert text.startswith("<|start|>system<|message|>")
    assert "<|start|>assistant to=functions.get_weather<|channel|>commentary" in text
    assert text.endswith(
        "<|start|>assistant<|channel|>final<|message|>Paris 21C, Oslo snowing.<|end|>"
    )

    # Every split point, all at once: the servicer handles calls concurrently.
    heads = [
        stub.Render(
            tokenizer_pb2.RenderRequest(instructions="Be brief.", tools=TOOLS, items=ITEMS[:k])
        )
        for k in range(len(ITEMS) + 1)
    ]
    tails = [
        stub.RenderAppend(tokenizer_pb2.RenderAppendRequest(items=ITEMS[k:]))
        for k in range(len(ITEMS) + 1)
    ]
    results = await asyncio.gather(*heads, *tails)
    for k in range(len(ITEMS) + 1):
        head, tail = results[k], results[len(ITEMS) + 1 + k]
        assert list(head.tokens) + list(tail.tokens) == list(full.tokens), f"split at {k}"
        assert tail.completion_prompt == full.completion_prompt

    empty = await stub.RenderAppend(tokenizer_pb2.RenderAppendRequest())
    assert list(empty.tokens) == []

    count = await stub.CountText(tokenizer_pb2.CountTextRequest(text="hello world"))
    assert count.tokens == 2
    big = await stub.CountText(tokenizer_pb2.CountTextRequest(text="snow " * 5000))
    assert big.tokens == len(enc.encode("snow " * 5000))


INVALID = [
    (
        tokenizer_pb2.RenderRequest(items=[Item(kind=Item.KIND_UNSPECIFIED, id="m1")]),
        "items[0] (id 'm1'): unknown item kind",
    ),
    (
        # Large enough to be rendered on a worker thread: errors come back from there too.
        tokenizer_pb2.RenderAppendRequest(
            items=[
                Item(kind=Item.MESSAGE, role="user", text="x" * 20000),
                Item(kind=Item.FUNCTION_CALL, arguments="{}"),
            ]
        ),
        "items[1]: a function_call needs a name",
    ),
    (tokenizer_pb2.RenderRequest(tools=[Tool(name="f", parameters_json="nope")]), "not valid JSON"),
]


async def test_invalid_input_is_invalid_argument(stub: tokenizer_pb2_grpc.TokenizerStub) -> None:
    for request, fragment in INVALID:
        method = (
            stub.Render if isinstance(request, tokenizer_pb2.RenderRequest) else stub.RenderAppend
        )
        with pytest.raises(grpc.aio.AioRpcError) as excinfo:
            await method(request)
        assert excinfo.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert fragment in (excinfo.value.details() or "")
    # The service is still fine afterwards.
    ok = await stub.CountText(tokenizer_pb2.CountTextRequest(text="still here"))
    assert ok.tokens > 0


async def test_sigterm_exits_cleanly(tokenizer: Tokenizer) -> None:
    await tokenizer.start()
    async with insecure_channel(tokenizer.address) as channel:
        stub = tokenizer_pb2_grpc.TokenizerStub(channel)
        reply = await stub.CountText(tokenizer_pb2.CountTextRequest(text="bye"))
        assert reply.tokens == 1
    assert tokenizer.proc is not None
    tokenizer.proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(tokenizer.proc.wait, 10)
    assert code == 0


async def test_renders_and_their_tokens_are_counted_by_mode() -> None:
    servicer = TokenizerServicer(Renderer())
    renders, tokens = "turnpike_tokenizer_renders_total", "turnpike_tokenizer_tokens_rendered_total"
    full, full_tokens = Delta(renders, mode="full"), Delta(tokens, mode="full")
    append, append_tokens = Delta(renders, mode="append"), Delta(tokens, mode="append")

    head = await servicer.Render(
        tokenizer_pb2.RenderRequest(instructions="Be brief.", tools=TOOLS, items=ITEMS[:3]), None
    )
    tail = await servicer.RenderAppend(tokenizer_pb2.RenderAppendRequest(items=ITEMS[3:]), None)
    assert (full.change, full_tokens.change) == (1, len(head.tokens))
    assert (append.change, append_tokens.change) == (1, len(tail.tokens))
    assert len(tail.tokens) > 5000  # the large output, rendered on a worker thread


async def test_a_pathological_run_is_encoded_and_oversized_input_refused(
    tokenizer: Tokenizer,
) -> None:
    """One character repeated a million times took minutes and then overflowed the native
    stack; it is encoded in bounded pieces now. Over the service's bound: RESOURCE_EXHAUSTED
    before any encoding."""
    await tokenizer.start(TURNPIKE_TOKENIZER_MAX_CHARS="1500000")
    async with insecure_channel(tokenizer.address) as channel:
        stub = tokenizer_pb2_grpc.TokenizerStub(channel)
        run = Item(kind=Item.MESSAGE, role="user", text="\u00e9" * 1_000_000)
        reply = await stub.RenderAppend(tokenizer_pb2.RenderAppendRequest(items=[run]))
        assert len(reply.tokens) > 1_000_000  # one token per character, and the frame
        too_many = Item(kind=Item.MESSAGE, role="user", text="a" * 1_600_000)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.Render(tokenizer_pb2.RenderRequest(items=[too_many]))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.CountText(tokenizer_pb2.CountTextRequest(text="a" * 1_600_000))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (await stub.CountText(tokenizer_pb2.CountTextRequest(text="still up"))).tokens
