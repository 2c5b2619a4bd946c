"""The service side of session streams (turnpike.session_server), for safety and the
tokenizer, over real gRPC in process: each request answered as its call would answer,
state that is the stream's own, refusals in band, and the bound on open streams."""

from __future__ import annotations

import grpc
import pytest

from turnpike import token_bytes
from turnpike.conversation.v1.conversation_pb2 import Item, Tool
from turnpike.grpc_malformed import MalformedRequestInterceptor
from turnpike.grpc_metrics import RpcMetricsInterceptor
from turnpike.safety.classifier import ProfanityClassifier
from turnpike.safety.engine import SafetyEngine
from turnpike.safety.policy import Thresholds
from turnpike.safety.server import SafetyServicer
from turnpike.safety.state import ConversationStore
from turnpike.safety.v1 import safety_pb2, safety_pb2_grpc
from turnpike.session_server import SessionLimit
from turnpike.tokenizer.render import Renderer
from turnpike.tokenizer.server import TokenizerServicer
from turnpike.tokenizer.v1 import tokenizer_pb2, tokenizer_pb2_grpc


@pytest.fixture(scope="module")
def classifier() -> ProfanityClassifier:
    return ProfanityClassifier()


@pytest.fixture(scope="module")
def renderer() -> Renderer:
    return Renderer()


async def serving(servicer: object, add: object) -> tuple[grpc.aio.Server, grpc.aio.Channel]:
    # The interceptors every service runs with (turnpike.grpc_server).
    server = grpc.aio.server(interceptors=[RpcMetricsInterceptor(), MalformedRequestInterceptor()])
    add(servicer, server)  # type: ignore[operator]
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, grpc.aio.insecure_channel(f"127.0.0.1:{port}")


def user(text: str, item_id: str) -> Item:
    return Item(kind=Item.MESSAGE, role="user", text=text, id=item_id)


def classify(
    seq: int, mode: safety_pb2.Mode, items: list[Item], conversation: str = "conv"
) -> safety_pb2.ClassifySessionRequest:
    return safety_pb2.ClassifySessionRequest(
        seq=seq,
        request=safety_pb2.ClassifyRequest(
            tenant="acme", conversation_id=conversation, mode=mode, fast_path=True, items=items
        ),
    )


class Exchanges:
    """A stream the test writes to and reads from, a request at a time."""

    def __init__(self, call: grpc.aio.StreamStreamCall) -> None:
        self.call = call

    async def ask(self, request: object) -> object:
        await self.call.write(request)
        return await self.call.read()


async def test_safety_keeps_each_streams_state_apart_from_the_shared_store(
    classifier: ProfanityClassifier,
) -> None:
    store = ConversationStore(10)
    servicer = SafetyServicer(SafetyEngine(classifier, Thresholds(), store), SessionLimit(4))
    server, channel = await serving(servicer, safety_pb2_grpc.add_SafetyServicer_to_server)
    try:
        stub = safety_pb2_grpc.SafetyStub(channel)
        one, two = Exchanges(stub.ClassifySession()), Exchanges(stub.ClassifySession())
        first = await one.ask(classify(1, safety_pb2.FULL, [user("hello", "a")]))
        assert isinstance(first, safety_pb2.ClassifySessionReply) and first.seq == 1
        assert first.response.items_seen == 1 and first.response.verdict == safety_pb2.ALLOW
        # Only the new item, folded into what this stream kept.
        second = await one.ask(classify(2, safety_pb2.INCREMENTAL, [user("more", "b")]))
        assert isinstance(second, safety_pb2.ClassifySessionReply)
        assert (second.response.items_scored, second.response.items_seen) == (1, 2)
        # Another connection's stream knows nothing of it; nor does the shared store.
        other = await two.ask(classify(1, safety_pb2.INCREMENTAL, [user("hi", "c")]))
        assert isinstance(other, safety_pb2.ClassifySessionReply)
        assert other.response.items_seen == 1
        assert len(store) == 0
        # A bad request is refused in band, as its call would be, and the stream goes on.
        bad = Item(kind=Item.MESSAGE, role="narrator", text="x")
        refused = await one.ask(classify(3, safety_pb2.FULL, [bad]))
        assert isinstance(refused, safety_pb2.ClassifySessionReply)
        assert refused.seq == 3 and refused.WhichOneof("outcome") == "refusal"
        assert refused.refusal.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "unknown message role" in refused.refusal.message
        again = await one.ask(classify(4, safety_pb2.INCREMENTAL, [user("on", "d")]))
        assert isinstance(again, safety_pb2.ClassifySessionReply)
        assert again.response.items_seen == 3
        for call in (one.call, two.call):
            await call.done_writing()
            assert await call.read() == grpc.aio.EOF
    finally:
        await channel.close()
        await server.stop(None)


async def test_streams_past_the_bound_are_refused_at_once(classifier: ProfanityClassifier) -> None:
    engine = SafetyEngine(classifier, Thresholds(), ConversationStore(10))
    limit = SessionLimit(1)
    server, channel = await serving(
        SafetyServicer(engine, limit), safety_pb2_grpc.add_SafetyServicer_to_server
    )
    try:
        stub = safety_pb2_grpc.SafetyStub(channel)
        held = Exchanges(stub.ClassifySession())
        await held.ask(classify(1, safety_pb2.FULL, [user("hello", "a")]))
        refused = Exchanges(stub.ClassifySession())
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await refused.ask(classify(1, safety_pb2.FULL, [user("hello", "a")]))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        await held.call.done_writing()
        assert await held.call.read() == grpc.aio.EOF
        assert limit.open == 0  # its place given back: the next one is served
        later = Exchanges(stub.ClassifySession())
        reply = await later.ask(classify(1, safety_pb2.FULL, [user("hello", "a")]))
        assert isinstance(reply, safety_pb2.ClassifySessionReply) and reply.response.items_seen
        later.call.cancel()
    finally:
        await channel.close()
        await server.stop(None)


async def test_a_message_that_does_not_parse_ends_the_stream_as_invalid(
    classifier: ProfanityClassifier,
) -> None:
    engine = SafetyEngine(classifier, Thresholds(), ConversationStore(10))
    server, channel = await serving(
        SafetyServicer(engine), safety_pb2_grpc.add_SafetyServicer_to_server
    )
    try:
        raw = channel.stream_stream(
            "/turnpike.safety.v1.Safety/ClassifySession",
            request_serializer=lambda b: b,
            response_deserializer=safety_pb2.ClassifySessionReply.FromString,
        )
        call = raw()
        await call.write(b"\xff\xff\xff")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call.read()
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        await channel.close()
        await server.stop(None)


async def test_the_tokenizer_stream_renders_as_its_calls_do(renderer: Renderer) -> None:
    server, channel = await serving(
        TokenizerServicer(renderer, max_chars=10_000),
        tokenizer_pb2_grpc.add_TokenizerServicer_to_server,
    )
    try:
        stub = tokenizer_pb2_grpc.TokenizerStub(channel)
        full = tokenizer_pb2.RenderRequest(instructions="Be brief.", items=[user("hi", "a")])
        append = tokenizer_pb2.RenderAppendRequest(items=[user("more", "b")])
        stream = Exchanges(stub.RenderSession())
        by_stream = await stream.ask(tokenizer_pb2.RenderSessionRequest(seq=1, full=full))
        assert isinstance(by_stream, tokenizer_pb2.RenderSessionReply)
        assert by_stream.response == await stub.Render(full)
        appended = await stream.ask(tokenizer_pb2.RenderSessionRequest(seq=2, append=append))
        assert isinstance(appended, tokenizer_pb2.RenderSessionReply)
        assert appended.response == await stub.RenderAppend(append)
        # Asked packed: the same tokens as bytes (turnpike.token_bytes), the lists empty.
        packed_full = tokenizer_pb2.RenderRequest()
        packed_full.CopyFrom(full)
        packed_full.packed = True
        packed = await stub.Render(packed_full)
        assert not packed.tokens and not packed.completion_prompt
        assert token_bytes.unpack(packed.packed_tokens).tolist() == list(by_stream.response.tokens)
        assert token_bytes.unpack(packed.packed_completion_prompt).tolist() == list(
            by_stream.response.completion_prompt
        )
        # Refusals carry what the call's status would: the code, and the field at fault.
        bad_tool = tokenizer_pb2.RenderRequest(tools=[Tool(name="f", parameters_json="[1]")])
        refused = await stream.ask(tokenizer_pb2.RenderSessionRequest(seq=3, full=bad_tool))
        assert isinstance(refused, tokenizer_pb2.RenderSessionReply)
        assert refused.refusal.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert refused.refusal.param == "tools[0].parameters"
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await stub.Render(bad_tool)
        assert err.value.details() == refused.refusal.message
        huge = tokenizer_pb2.RenderAppendRequest(items=[user("x" * 20_000, "c")])
        over = await stream.ask(tokenizer_pb2.RenderSessionRequest(seq=4, append=huge))
        assert isinstance(over, tokenizer_pb2.RenderSessionReply)
        assert over.refusal.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        empty = await stream.ask(tokenizer_pb2.RenderSessionRequest(seq=5))
        assert isinstance(empty, tokenizer_pb2.RenderSessionReply)
        assert empty.refusal.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        await stream.call.done_writing()
        assert await stream.call.read() == grpc.aio.EOF
    finally:
        await channel.close()
        await server.stop(None)
