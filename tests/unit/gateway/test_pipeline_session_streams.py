"""The stages on session streams (turnpike.gateway.upstream.sessions), with in-process
stand-ins: a socket's turns are asked on its streams, safety sends only the new items of
a turn that continues what its stream folded, a broken stream falls back to the calls
with the same answer, and a refusal on a stream is the error the call would give."""

from __future__ import annotations

import dataclasses

import grpc
import pytest
from support.billing_standin import recording_outbox
from support.gateway_standins import (
    TENANT,
    StandIns,
    cached_parent,
    create,
    message,
    prepare,
    prompt_of,
    resources,
)

from turnpike.gateway.engine.response_engine import ResponseEngine
from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.pipeline.request_context import RequestContext
from turnpike.gateway.pipeline.variants import CONNECTION, SPRINT
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.state.connection_cache import ConnectionCache
from turnpike.gateway.state.responses import StoredResponse
from turnpike.gateway.upstream.sessions import ConnectionStreams
from turnpike.safety.v1 import safety_pb2
from turnpike.session.v1 import session_pb2

NEW_INPUT = [message("user", "and then?", "msg_u2")]


@pytest.fixture
def engine(backends: StandIns) -> ResponseEngine:
    return ResponseEngine(resources(backends, sessions=True), outbox=recording_outbox())


def socket_streams(engine: ResponseEngine) -> ConnectionStreams:
    assert engine.res.sessions is not None
    streams = engine.res.sessions.for_socket()
    assert streams is not None
    return streams


def on_socket(cache: ConnectionCache, streams: ConnectionStreams) -> RequestContext:
    return RequestContext(
        TENANT, CONNECTION.name, transport="websocket", connection_cache=cache, streams=streams
    )


async def first_and_follow_up(
    engine: ResponseEngine, cache: ConnectionCache, streams: ConnectionStreams
) -> tuple[Prepared, Prepared]:
    """A socket's first turn, then a turn continuing it from the connection cache."""
    first = await prepare(engine, create(websocket=True), CONNECTION, on_socket(cache, streams))
    assert first.conversation is not None
    follow_up = create(websocket=True, previous_response_id=first.response_id, input=NEW_INPUT)
    cache.put(
        first.response_id,
        dataclasses.replace(
            cached_parent(follow_up),
            response={"id": first.response_id},
            conversation_id=first.conversation.conversation_id,
        ),
    )
    second = await prepare(engine, follow_up, CONNECTION, on_socket(cache, streams))
    return first, second


async def test_a_socket_asks_on_its_streams_and_safety_gets_only_new_items(
    engine: ResponseEngine, backends: StandIns
) -> None:
    cache = ConnectionCache(8)
    first, second = await first_and_follow_up(engine, cache, socket_streams(engine))
    assert backends.safety.requests == []  # no call: both turns on the stream
    whole, new = backends.safety.on_stream
    assert whole.mode == safety_pb2.FULL and len(whole.items) == 1
    # The stream's state ends with the first turn: the second sends its new item only.
    assert new.mode == safety_pb2.INCREMENTAL and [i.id for i in new.items] == ["msg_u2"]
    assert new.conversation_id == whole.conversation_id == first.response_id
    assert backends.tokenizer.calls == [("Render on stream", 1), ("RenderAppend on stream", 1)]
    assert prompt_of(second).tokens[-5:].tolist() == [2, 2, 2, 9, 9]


async def test_a_broken_stream_falls_back_to_calls_with_the_same_answer(
    engine: ResponseEngine, backends: StandIns
) -> None:
    cache = ConnectionCache(8)
    _, on_stream = await first_and_follow_up(engine, cache, socket_streams(engine))
    other = StandIns()  # the same turns on a stream that breaks
    other.safety.broken = other.tokenizer.broken = True
    broken_engine = ResponseEngine(resources(other, sessions=True), outbox=recording_outbox())
    _, by_calls = await first_and_follow_up(
        broken_engine, ConnectionCache(8), socket_streams(broken_engine)
    )
    assert other.safety.on_stream == []
    whole, again = other.safety.requests
    # The stream's state went with it: the call classifies the whole history.
    assert whole.mode == again.mode == safety_pb2.FULL
    assert [i.id for i in again.items][-1] == "msg_u2" and len(again.items) == 3
    assert other.tokenizer.calls == [("Render", 1), ("RenderAppend", 1)]
    assert prompt_of(by_calls).tokens == prompt_of(on_stream).tokens
    assert by_calls.safety_flags == on_stream.safety_flags == ()


async def test_a_refusal_on_a_stream_is_the_calls_error(
    engine: ResponseEngine, backends: StandIns
) -> None:
    backends.tokenizer.refusal = session_pb2.Refusal(
        code=grpc.StatusCode.INVALID_ARGUMENT.value[0],
        message="tools[0] ('f'): parameters_json must be a JSON object (a schema)",
        param="tools[0].parameters",
    )
    with pytest.raises(ApiError) as refused:
        await prepare(
            engine,
            create(websocket=True),
            CONNECTION,
            on_socket(ConnectionCache(8), socket_streams(engine)),
        )
    assert refused.value.status == 400 and refused.value.param == "tools[0].parameters"
    assert "must be a JSON object" in refused.value.message


async def test_a_chain_of_http_turns_keeps_its_session(
    engine: ResponseEngine, backends: StandIns
) -> None:
    first = await prepare(engine, create(), SPRINT)
    assert first.conversation is not None
    await engine.res.store.put(
        StoredResponse(TENANT, {"id": first.response_id, "output": []}, [], first.response_id)
    )
    follow_up = create(previous_response_id=first.response_id, input=NEW_INPUT)
    await prepare(engine, follow_up, SPRINT)
    assert backends.safety.requests == []
    whole, new = backends.safety.on_stream
    assert whole.mode == safety_pb2.FULL
    assert new.mode == safety_pb2.INCREMENTAL and [i.id for i in new.items] == ["msg_u2"]
    assert engine.res.sessions is not None and len(engine.res.sessions) == 1  # one chain
