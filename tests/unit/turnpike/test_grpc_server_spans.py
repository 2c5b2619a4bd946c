"""Server spans of the gRPC calls a service answers (turnpike.grpc_tracing's
ServerSpansInterceptor), over real gRPC in process: the child of the caller's context,
named and attributed as OpenTelemetry's RPC conventions say, with the status the caller
saw; health checks and session streams unspanned; each method's traced handler made once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from turnpike.grpc_metrics import RpcMetricsInterceptor
from turnpike.grpc_tracing import ServerSpansInterceptor

SERVICE = "turnpike.test.Echo"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"
TRACEPARENT = (("traceparent", f"00-{TRACE_ID}-{PARENT_ID}-01"),)


def _identity(data: bytes) -> bytes:
    return data


async def _echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return request


async def _refuse(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no")
    raise AssertionError("abort returns by raising")


async def _unavailable(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    await context.abort(grpc.StatusCode.UNAVAILABLE, "draining")
    raise AssertionError("abort returns by raising")


async def _bug(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    raise ValueError("a servicer's bug")


async def _count(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    for n in range(3):
        yield bytes([n])


async def _session(
    requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request


def _unary(behavior: Callable[..., Any]) -> grpc.RpcMethodHandler:
    return grpc.unary_unary_rpc_method_handler(
        behavior, request_deserializer=_identity, response_serializer=_identity
    )


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
async def channel(exporter: InMemorySpanExporter) -> AsyncIterator[grpc.aio.Channel]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    spans = ServerSpansInterceptor(provider.get_tracer("test"))
    server = grpc.aio.server(interceptors=[spans, RpcMetricsInterceptor()])
    handlers = {
        "Echo": _unary(_echo),
        "Refuse": _unary(_refuse),
        "Unavailable": _unary(_unavailable),
        "Bug": _unary(_bug),
        "Count": grpc.unary_stream_rpc_method_handler(
            _count, request_deserializer=_identity, response_serializer=_identity
        ),
        "ClassifySession": grpc.stream_stream_rpc_method_handler(
            _session, request_deserializer=_identity, response_serializer=_identity
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        yield ch
    await server.stop(None)


def _call(channel: grpc.aio.Channel, method: str) -> Any:
    return channel.unary_unary(
        f"/{SERVICE}/{method}", request_serializer=_identity, response_deserializer=_identity
    )


def _only(exporter: InMemorySpanExporter) -> ReadableSpan:
    [span] = exporter.get_finished_spans()
    return span


async def test_a_call_is_a_server_span_child_of_its_caller(channel, exporter) -> None:
    assert await _call(channel, "Echo")(b"hi", metadata=TRACEPARENT) == b"hi"
    span = _only(exporter)
    assert span.name == f"/{SERVICE}/Echo"
    assert span.kind is SpanKind.SERVER
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT_ID
    assert dict(span.attributes or {}) == {
        "rpc.system": "grpc",
        "rpc.service": SERVICE,
        "rpc.method": "Echo",
        "rpc.grpc.status_code": 0,
    }
    assert span.status.status_code is StatusCode.UNSET


async def test_a_call_without_a_caller_context_starts_a_trace(channel, exporter) -> None:
    await _call(channel, "Echo")(b"hi")
    assert _only(exporter).parent is None


async def test_the_callers_error_is_recorded_but_not_the_servers(channel, exporter) -> None:
    with pytest.raises(grpc.aio.AioRpcError):
        await _call(channel, "Refuse")(b"", metadata=TRACEPARENT)
    span = _only(exporter)
    assert span.attributes is not None and span.attributes["rpc.grpc.status_code"] == 3
    assert span.status.status_code is StatusCode.UNSET


async def test_a_server_failure_is_an_error_span(channel, exporter) -> None:
    with pytest.raises(grpc.aio.AioRpcError):
        await _call(channel, "Unavailable")(b"")
    span = _only(exporter)
    assert span.attributes is not None and span.attributes["rpc.grpc.status_code"] == 14
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "UNAVAILABLE: draining"


async def test_a_servicers_bug_is_unknown_with_its_exception(channel, exporter) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await _call(channel, "Bug")(b"")
    assert raised.value.code() is grpc.StatusCode.UNKNOWN
    span = _only(exporter)
    assert span.attributes is not None and span.attributes["rpc.grpc.status_code"] == 2
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]


async def test_a_stream_is_one_span_until_its_last_message(channel, exporter) -> None:
    count = channel.unary_stream(
        f"/{SERVICE}/Count", request_serializer=_identity, response_deserializer=_identity
    )
    assert [m async for m in count(b"", metadata=TRACEPARENT)] == [b"\0", b"\1", b"\2"]
    span = _only(exporter)
    assert span.name == f"/{SERVICE}/Count"
    assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT_ID


async def test_session_streams_are_not_spanned_whole(channel, exporter) -> None:
    session = channel.stream_stream(
        f"/{SERVICE}/ClassifySession",
        request_serializer=_identity,
        response_deserializer=_identity,
    )
    call = session()
    await call.write(b"x")
    assert await call.read() == b"x"
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    assert exporter.get_finished_spans() == ()


async def test_each_methods_traced_handler_is_made_once() -> None:
    made: list[str] = []
    interceptor = ServerSpansInterceptor(TracerProvider().get_tracer("test"))
    handler = _unary(_echo)

    async def continuation(details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        made.append(details.method)
        return handler

    class Details(grpc.HandlerCallDetails):
        method = f"/{SERVICE}/Echo"
        invocation_metadata = ()

    first = await interceptor.intercept_service(continuation, Details())
    second = await interceptor.intercept_service(continuation, Details())
    assert first is second and first is not handler
    assert made == [Details.method, Details.method]
