"""Client spans and trace context for the gRPC calls a service makes, without grpc.aio
client interceptors; and the server spans of the calls it answers.

A channel given interceptors wraps every call (and every message of every stream) in
grpcio's intercepted-call machinery: an extra task and queue per call, paid whether or
not a span is made. With tracing on, that machinery cost the gateway more than the spans
themselves (``make bench-load`` with a tracing variant; docs/observability.md). Here a
channel is wrapped instead: each unary or server-streaming method, when called, starts a
client span named as OpenTelemetry's gRPC conventions name it (``/package.Service/Method``),
puts its W3C context in the call's metadata, and ends it when the call ends, with its status
(however far a stream's caller read). A unary call only carries the caller's context: its
server span is the child of the span that asked, and a client span per call each way
was a third of what tracing cost a turn. Bidirectional streams (the session streams)
trace each exchange themselves; health checks are not traced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import grpc
from opentelemetry import trace
from opentelemetry.propagate import extract, inject
from opentelemetry.semconv._incubating.attributes.rpc_attributes import RPC_GRPC_STATUS_CODE
from opentelemetry.trace import SpanKind, Status, StatusCode

from turnpike.grpc_wrapping import AroundCallsInterceptor, status_of

UNTRACED_PREFIX = "/grpc.health.v1.Health/"

# Span-ending tasks, referenced until they ran (the loop keeps only weak references).
_pending: set[asyncio.Task[None]] = set()


def _attributes(method: str) -> dict[str, str]:
    service, _, name = method.lstrip("/").rpartition("/")
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}


async def _end_with_status(span: trace.Span, call: grpc.aio.Call) -> None:
    try:
        code = await call.code()  # already known: the call is done
        span.set_attribute(RPC_GRPC_STATUS_CODE, code.value[0])
        if code != grpc.StatusCode.OK:
            span.set_status(Status(StatusCode.ERROR, await call.details()))
    finally:
        span.end()


class _Propagated:
    """A multicallable whose calls carry the current trace context, without a span of
    their own: the service's span of the call is the child of the caller's current span."""

    def __init__(self, inner: Callable[..., Any]) -> None:
        self._inner = inner

    def __call__(self, request: Any, *, metadata: Sequence[Any] | None = None, **kw: Any) -> Any:
        carrier: dict[str, str] = {}
        inject(carrier)
        return self._inner(request, metadata=(*(metadata or ()), *carrier.items()), **kw)


class _Traced:
    """A multicallable whose calls each get a client span."""

    def __init__(self, inner: Callable[..., Any], method: str, tracer: trace.Tracer) -> None:
        self._inner, self._method, self._tracer = inner, method, tracer
        self._attributes = _attributes(method)

    def __call__(self, request: Any, *, metadata: Sequence[Any] | None = None, **kw: Any) -> Any:
        span = self._tracer.start_span(
            self._method, kind=SpanKind.CLIENT, attributes=self._attributes
        )
        carrier: dict[str, str] = {}
        inject(carrier, context=trace.set_span_in_context(span))
        try:
            call = self._inner(request, metadata=(*(metadata or ()), *carrier.items()), **kw)
        except BaseException:
            span.end()
            raise
        call.add_done_callback(lambda done: _end_later(span, done))
        return call


def _end_later(span: trace.Span, call: grpc.aio.Call) -> None:
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # the loop is gone (process exit): end without a status
        span.end()
        return
    task = loop.create_task(_end_with_status(span, call))
    _pending.add(task)
    task.add_done_callback(_pending.discard)


class TracedChannel:
    """``channel``, its unary and server-streaming methods traced (see the module)."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        tracer: trace.Tracer | None = None,
        unary_spans: bool = False,
    ) -> None:
        self._channel = channel
        self._tracer = tracer or trace.get_tracer("turnpike.grpc")
        # A unary call's client span says little its server span does not (when it was
        # asked, how long it took), and costs as much as one: only carried by default.
        self._unary_spans = unary_spans

    def unary_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        inner = self._channel.unary_unary(method, *args, **kwargs)
        if method.startswith(UNTRACED_PREFIX):
            return inner
        if self._unary_spans:
            return _Traced(inner, method, self._tracer)
        return _Propagated(inner)

    def unary_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        inner = self._channel.unary_stream(method, *args, **kwargs)
        return inner if method.startswith(UNTRACED_PREFIX) else _Traced(inner, method, self._tracer)

    def stream_unary(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._channel.stream_unary(method, *args, **kwargs)

    def stream_stream(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return self._channel.stream_stream(method, *args, **kwargs)

    async def close(self, grace: float | None = None) -> None:
        await self._channel.close(grace)

    async def __aenter__(self) -> TracedChannel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._channel, name)


# Codes that are the server's failure (OpenTelemetry's RPC conventions); the rest (a bad
# argument, not found, ...) are the caller's, and leave a server span's status unset.
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)


# A session stream lives as long as its client connection: its exchanges are spanned one by
# one (turnpike.session_server), not the stream's whole life.
UNSPANNED_METHODS = frozenset({"ClassifySession", "RenderSession"})


class _ServerSpans:
    """A server span around every call of one method, the child of the caller's context
    (its ``traceparent`` metadata) and current while the servicer runs."""

    def __init__(self, method: str, tracer: trace.Tracer) -> None:
        self._method, self._tracer = method, tracer
        self._attributes = _attributes(method)

    @contextmanager
    def call(self, context: grpc.aio.ServicerContext) -> Iterator[None]:
        parent = extract(dict(context.invocation_metadata() or ()))
        with self._tracer.start_as_current_span(
            self._method,
            context=parent,
            kind=SpanKind.SERVER,
            attributes=self._attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            error: BaseException | None = None
            try:
                yield
            except BaseException as exc:
                error = exc
                raise
            finally:
                code = status_of(context, error)
                span.set_attribute(RPC_GRPC_STATUS_CODE, code.value[0])
                if code in _SERVER_ERRORS:
                    span.set_status(Status(StatusCode.ERROR, f"{code.name}: {context.details()}"))
                if code is grpc.StatusCode.UNKNOWN and isinstance(error, Exception):
                    span.record_exception(error)  # a servicer's bug, not an abort


class ServerSpansInterceptor(AroundCallsInterceptor):
    """A server span per call of every method but health checks and session streams (whose
    exchanges are spanned one by one: turnpike.session_server). Each method's traced handler
    is made once: opentelemetry-instrumentation-grpc's interceptor, used before, wrapped every
    call anew, parsed the peer's address and copied the metadata twice, costing an empty call
    about 55 µs of CPU more than this one does (with the span itself about 60)."""

    def __init__(self, tracer: trace.Tracer | None = None) -> None:
        spans_tracer = tracer or trace.get_tracer("turnpike.grpc")
        super().__init__(lambda method: _spanned(method, spans_tracer))


def _spanned(method: str, tracer: trace.Tracer) -> _ServerSpans | None:
    if method.startswith(UNTRACED_PREFIX) or method.rpartition("/")[2] in UNSPANNED_METHODS:
        return None
    return _ServerSpans(method, tracer)
