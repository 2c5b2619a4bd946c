"""The service side of a session stream (``turnpike/session/v1``): one long-lived stream
per client connection, its requests answered one at a time in the order they came, a
refusal sent in band so that the stream goes on.

A stream is not a call, so what a call gets from the server's interceptors a stream
gets here for each exchange: its duration and outcome as metrics, and a span that is a
child of the caller's (the trace context travels in the message). The number of open
streams is bounded per process; past the bound a new stream is refused at once
(RESOURCE_EXHAUSTED), and the gateway asks by unary calls instead.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import nullcontext
from typing import Any, Protocol, TypeVar

import grpc
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from prometheus_client import Counter, Gauge, Histogram

from turnpike import telemetry
from turnpike.metrics import API_SECONDS
from turnpike.session.v1 import session_pb2

EXCHANGE_SECONDS = Histogram(
    "turnpike_grpc_server_session_exchange_seconds",
    "Time a service spent on one request of a session stream, from its arrival to its reply.",
    ["grpc_service", "grpc_method"],
    buckets=API_SECONDS,
)
EXCHANGES = Counter(
    "turnpike_grpc_server_session_exchanges",
    "Requests answered on session streams: ok, or refused (in band, with the status a unary "
    "call would have ended with).",
    ["grpc_service", "grpc_method", "outcome"],
)
OPEN = Gauge(
    "turnpike_grpc_server_session_streams",
    "Session streams open now.",
    ["grpc_service", "grpc_method"],
    multiprocess_mode="livesum",
)
REFUSED_STREAMS = Counter(
    "turnpike_grpc_server_session_streams_refused",
    "Session streams refused at opening: the process had as many open as it may.",
    ["grpc_service", "grpc_method"],
)

_W3C = TraceContextTextMapPropagator()
_tracer = trace.get_tracer("turnpike.session")

Request = TypeVar("Request", bound="SessionRequest")
Reply = TypeVar("Reply")


class SessionRequest(Protocol):
    seq: int
    trace: session_pb2.TraceContext


class Refused(Exception):
    """What a request of a session gets instead of an answer: the status a unary call
    would have ended with (and the field at fault, when known)."""

    def __init__(self, code: grpc.StatusCode, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param

    def refusal(self) -> session_pb2.Refusal:
        return session_pb2.Refusal(
            code=self.code.value[0], message=self.message, param=self.param or ""
        )


class SessionLimit:
    """Session streams one process keeps open at most (all its methods together)."""

    def __init__(self, max_streams: int) -> None:
        self.max_streams = max_streams
        self.open = 0


def _span(service: str, method: str, carried: session_pb2.TraceContext) -> Any:
    """The exchange's span, child of the caller's (nothing when tracing is off)."""
    if not telemetry.enabled():
        return nullcontext()
    carrier = {"traceparent": carried.traceparent}
    if carried.tracestate:
        carrier["tracestate"] = carried.tracestate
    parent = _W3C.extract(carrier) if carried.traceparent else None
    return _tracer.start_as_current_span(
        f"{service}/{method} exchange", context=parent, kind=trace.SpanKind.SERVER
    )


async def serve_session(
    requests: AsyncIterator[Request],
    context: grpc.aio.ServicerContext,
    limit: SessionLimit,
    service: str,
    method: str,
    answer: Callable[[Request], Awaitable[Reply]],
    refused: Callable[[int, session_pb2.Refusal], Reply],
) -> AsyncIterator[Reply]:
    """Each request's ``answer`` (or, when it raises ``Refused``, its ``refused`` reply),
    in order, until the caller closes the stream."""
    if limit.open >= limit.max_streams:
        REFUSED_STREAMS.labels(service, method).inc()
        await context.abort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"This process has {limit.open} session streams open, its limit: ask by calls.",
        )
    limit.open += 1
    opened = OPEN.labels(service, method)
    opened.inc()
    seconds = EXCHANGE_SECONDS.labels(service, method)
    ok, refusals = (
        EXCHANGES.labels(service, method, "ok"),
        EXCHANGES.labels(service, method, "refused"),
    )
    try:
        async for request in requests:
            started = time.perf_counter()
            with _span(service, method, request.trace):
                try:
                    reply = await answer(request)
                    ok.inc()
                except Refused as exc:
                    reply = refused(request.seq, exc.refusal())
                    refusals.inc()
            seconds.observe(time.perf_counter() - started)
            yield reply
    finally:
        limit.open -= 1
        opened.dec()
