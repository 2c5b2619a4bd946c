"""The gateway's end of one session stream (``turnpike/session/v1``): a long-lived
bidirectional stream to a service, shared by the turns of one client connection.

Requests are written one at a time and the service answers in the same order, so each
reply goes to the oldest request still waiting (its ``seq`` is checked). Several turns
may wait at once (the lanes of a WebSocket), and a turn that stops waiting (its client
left) leaves its reply to be read and dropped.

A stream that fails in any way (the service restarted, a reply did not come within the
deadline, a reply out of order) is *broken*: every waiting turn gets ``StreamBroken``
and asks by a unary call instead, and the next turn opens a new stream. Each stream
opened starts a new ``generation``: what the far side kept (safety's scored state) is
then gone, and the caller knows it from the number.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import grpc
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from turnpike import telemetry
from turnpike.gateway import metrics

log = logging.getLogger(__name__)

_W3C = TraceContextTextMapPropagator()
_tracer = trace.get_tracer("turnpike.gateway")


class SessionMessage(Protocol):
    seq: int


Request = TypeVar("Request", bound=SessionMessage)
Reply = TypeVar("Reply", bound=SessionMessage)
# Opens the stream: the stub's stream-stream method, called with no request iterator.
Opener = Callable[[], Any]


class StreamBroken(Exception):
    """The stream cannot answer this request: ask by a call."""


class Answered(NamedTuple, Generic[Reply]):
    reply: Reply
    generation: int  # of the stream that answered: whose state the far side folded it into


class SessionStream(Generic[Request, Reply]):
    def __init__(self, service: str, method: str, opener: Opener, timeout_s: float) -> None:
        """``service``: the short name (metrics, logs); ``method``: the full gRPC name
        (``turnpike.safety.v1.Safety/ClassifySession``), which names the exchanges' spans
        as the service names its own."""
        self.service, self.method = service, method
        self._open = opener
        self._timeout_s = timeout_s
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: deque[tuple[int, asyncio.Future[Reply]]] = deque()
        self._writing = asyncio.Lock()
        self._seq = 0
        self.generation = 0  # streams opened so far; the far side's state is the last one's
        self.closed = False

    @property
    def open(self) -> bool:
        return self._call is not None

    async def exchange(self, request: Request) -> Answered[Reply]:
        """The service's reply to ``request``, or ``StreamBroken``."""
        if self.closed:
            raise StreamBroken(f"the {self.service} session is closed")
        _carry_trace(request)
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        async with self._writing:  # one write at a time, in the order of ``_waiting``
            call = self._call if self._call is not None else self._start()
            generation = self.generation
            self._seq += 1
            request.seq = self._seq
            self._waiting.append((self._seq, future))
            try:
                await call.write(request)
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, RuntimeError) as exc:
                self._break(call, f"write failed: {exc}")
        try:
            async with asyncio.timeout(self._timeout_s):
                return Answered(await future, generation)
        except TimeoutError:
            self._break(call, f"no reply within {self._timeout_s:g} s")
            raise StreamBroken(f"the {self.service} stream did not answer in time") from None

    def _start(self) -> Any:
        call = self._open()
        self._call = call
        self.generation += 1
        self._reader = asyncio.create_task(self._read(call))
        metrics.SESSION_STREAMS.labels(self.service).inc()
        return call

    async def _read(self, call: Any) -> None:
        reason = "closed by the service"
        try:
            while True:
                reply = await call.read()
                if reply is grpc.aio.EOF:
                    break
                if not self._waiting:
                    reason = "a reply nobody asked for"
                    break
                seq, future = self._waiting[0]
                if reply.seq != seq:  # left waiting: ``_break`` fails it with the rest
                    reason = f"reply {reply.seq} where {seq} was due"
                    break
                self._waiting.popleft()
                if not future.done():  # a turn that stopped waiting leaves it unread
                    future.set_result(reply)
        except asyncio.CancelledError:
            reason = "closed"
            raise
        except grpc.aio.AioRpcError as exc:
            reason = f"{exc.code().name}: {exc.details()}"
        finally:
            self._break(call, reason)

    def _break(self, call: Any, reason: str) -> None:
        """End ``call`` (if it is still the current stream) and fail whoever waits on it."""
        if call is not self._call:
            return
        self._call = None
        call.cancel()
        metrics.SESSION_STREAMS.labels(self.service).dec()
        if not self.closed:
            metrics.SESSION_STREAM_BREAKS.labels(self.service).inc()
            log.info("%s session stream broken (%s): turns ask by calls", self.service, reason)
        waiting, self._waiting = self._waiting, deque()
        for _, future in waiting:
            if not future.done():
                future.set_exception(StreamBroken(f"the {self.service} stream broke: {reason}"))
        reader = self._reader
        self._reader = None
        if reader is not None and reader is not asyncio.current_task():
            reader.cancel()

    def close(self) -> None:
        """Close the stream (its client connection ended): the far side drops its state."""
        self.closed = True
        if self._call is not None:
            self._break(self._call, "closed")


def _carry_trace(request: Any) -> None:
    """Put the turn's trace context (its response's span) in the request, as a stream's
    messages have no metadata of their own: the service's span of the exchange is that
    span's child. No client span is made here: the stage's time is on the response's span
    already, and a span per hop at each end doubled what tracing cost a turn."""
    if telemetry.is_noop(_tracer):
        return
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    request.trace.traceparent = carrier.get("traceparent", "")
    request.trace.tracestate = carrier.get("tracestate", "")
