"""At-least-once delivery of usage events to the billing service.

Events wait in a queue and are retried with backoff until billing
acknowledges them; the ledger is idempotent on the response id, so a
redelivery is never billed twice. A billing outage delays records, it does
not lose them (while the gateway process lives; a shared tier makes the
queue durable across gateway restarts). The queue is bounded: once
``max_events`` wait, finishing a response waits for room (backpressure)
rather than dropping a record or growing without limit.

Tracing: a queued event carries the span context of the response it bills.
Each delivery attempt is a span of its own, in a trace of its own, LINKED to
that response: delivery happens after the response has finished, and may be
retried for minutes, so it must not hold the response's trace open.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import grpc
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, Status, StatusCode
from turnpike.billing.v1 import billing_pb2, billing_pb2_grpc

log = logging.getLogger(__name__)
tracer = trace.get_tracer("turnpike.gateway.billing")


@dataclass(frozen=True)
class QueuedUsage:
    event: billing_pb2.UsageEvent
    # The response's span context (invalid when tracing is off).
    origin: SpanContext = trace.INVALID_SPAN_CONTEXT


class BillingOutbox:
    def __init__(
        self,
        stub: billing_pb2_grpc.BillingStub,
        max_events: int = 100_000,
        timeout_s: float = 5.0,
        max_backoff_s: float = 5.0,
    ) -> None:
        self._stub = stub
        self._timeout = timeout_s
        self._max_backoff = max_backoff_s
        self._queue: asyncio.Queue[QueuedUsage] = asyncio.Queue(max_events)
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="billing outbox")

    async def submit(
        self, event: billing_pb2.UsageEvent, origin: SpanContext | None = None
    ) -> None:
        """Queue ``event`` (waiting while the queue is full); ``origin`` (default: the
        current span) is linked on delivery."""
        if origin is None:
            origin = trace.get_current_span().get_span_context()
        if self._queue.full():
            log.warning("billing outbox full (%d events waiting); waiting for room", self.pending)
        await self._queue.put(QueuedUsage(event, origin))

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    async def record_now(
        self, event: billing_pb2.UsageEvent, origin: SpanContext | None = None
    ) -> None:
        """Deliver on the caller's path (and in its trace); on failure fall back to the
        queue."""
        try:
            await self._stub.RecordUsage(event, timeout=self._timeout)
            self.delivered += 1
        except grpc.aio.AioRpcError as err:
            log.warning("billing unavailable (%s); queued %s", err.code(), event.event_id)
            await self.submit(event, origin)

    async def _run(self) -> None:
        while True:
            item = await self._queue.get()
            backoff = 0.1
            attempt = 1
            while (err := await self._deliver(item, attempt)) is not None:
                log.warning(
                    "billing delivery of %s failed (%s); retrying in %.1fs",
                    item.event.event_id,
                    err.code(),
                    backoff,
                )
                await asyncio.sleep(backoff)  # retry backoff, not on any request path
                backoff = min(backoff * 2, self._max_backoff)
                attempt += 1
            self._queue.task_done()

    async def _deliver(self, item: QueuedUsage, attempt: int) -> grpc.aio.AioRpcError | None:
        """One attempt; the error if it failed."""
        event = item.event
        links = [Link(item.origin)] if item.origin.is_valid else []
        with tracer.start_as_current_span(
            "billing.deliver_usage",
            context=otel_context.Context(),  # a new trace, linked to the response's
            links=links,
            attributes={"turnpike.billing.event_id": event.event_id, "turnpike.attempt": attempt},
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                await self._stub.RecordUsage(event, timeout=self._timeout)
            except grpc.aio.AioRpcError as err:
                span.set_status(Status(StatusCode.ERROR, f"billing: {err.code().name}"))
                return err
        self.delivered += 1
        return None

    async def close(self, timeout: float) -> None:
        """Try to deliver what is queued, then stop."""
        if self._task is None:
            return
        try:
            await asyncio.wait_for(self._queue.join(), timeout)
        except TimeoutError:
            log.error("billing outbox closed with %d undelivered usage events", self.pending)
        self._task.cancel()
