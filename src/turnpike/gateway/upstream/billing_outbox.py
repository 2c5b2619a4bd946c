"""At-least-once delivery of usage events to the billing service.

Events wait in a queue and are retried with backoff until billing
acknowledges them; the ledger is idempotent on the response id, so a
redelivery is never billed twice. A billing outage delays records, it does
not lose them (while the gateway process lives; a shared tier makes the
queue durable across gateway restarts). The queue is bounded: once
``max_events`` wait (besides the batch being delivered), finishing a response
waits for room (backpressure) rather than dropping a record or growing
without limit.

Batches: one delivery takes every event waiting, up to ``max_batch``, and
sends them in one ``RecordUsageBatch`` call (a lone event goes by
``RecordUsage``); billing commits them together. Nothing waits for a batch to
fill: under light load each event goes alone, at once, and batches form by
themselves while a call is in flight. A failed batch is retried whole; the
events of an attempt that billing did commit answer duplicate the next time.
Any failure is retried (a refused connection, a closed channel, anything): the
delivery loop never dies. The one exception is an event billing refuses as
invalid, which no retry can fix and which would hold up every event behind it:
its batch is split to find it, and it alone is set aside, logged in full at
ERROR and counted (``rejected``).

Tracing: a queued event carries the span context of the response it bills.
Each delivery attempt is a span of its own, in a trace of its own, LINKED to
the response of every event it carries: delivery happens after the response
has finished, and may be retried for minutes, so it must not hold the
response's trace open.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Protocol

import grpc
from google.protobuf import text_format
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext, Status, StatusCode

from turnpike.billing.v1 import billing_pb2
from turnpike.gateway import metrics

log = logging.getLogger(__name__)
tracer = trace.get_tracer("turnpike.gateway.billing")

# Events per delivery: every one links its response, and OpenTelemetry keeps 128 links per
# span by default (OTEL_SPAN_LINK_COUNT_LIMIT). Billing accepts up to 1000 per call.
MAX_BATCH = 128


@dataclass(frozen=True)
class QueuedUsage:
    event: billing_pb2.UsageEvent
    # The response's span context (invalid when tracing is off).
    origin: SpanContext = trace.INVALID_SPAN_CONTEXT


class BillingRpc(Protocol):
    """The calls the outbox makes: billing's ``BillingStub``, or a stand-in for it."""

    def RecordUsage(
        self, request: billing_pb2.UsageEvent, /, timeout: float | None = ...
    ) -> Awaitable[billing_pb2.RecordUsageResponse]: ...

    def RecordUsageBatch(
        self, request: billing_pb2.RecordUsageBatchRequest, /, timeout: float | None = ...
    ) -> Awaitable[billing_pb2.RecordUsageBatchResponse]: ...


class BillingOutbox:
    def __init__(
        self,
        stub: BillingRpc,
        max_events: int = 100_000,
        timeout_s: float = 5.0,
        max_backoff_s: float = 5.0,
        max_batch: int = MAX_BATCH,
    ) -> None:
        self._stub = stub
        self._timeout = timeout_s
        self._max_backoff = max_backoff_s
        self._max_batch = max_batch
        self._batch_rpc = True  # until billing says it has no RecordUsageBatch
        self._queue: asyncio.Queue[QueuedUsage] = asyncio.Queue(max_events)
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0
        self.rejected = 0
        # Events not yet delivered (queued or being delivered), by tenant: what a
        # tenant's /v1/usage reports, never another tenant's.
        self._undelivered: Counter[str] = Counter()

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
        self._undelivered[event.tenant] += 1
        metrics.BILLING_OUTBOX_BACKLOG.inc()

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def pending_for(self, tenant: str) -> int:
        """``tenant``'s usage events not yet delivered to billing."""
        return self._undelivered.get(tenant, 0)

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
            batch = await self._next_batch()
            await self._deliver_until_done(batch)
            metrics.BILLING_OUTBOX_BACKLOG.dec(len(batch))
            for item in batch:
                self._settled(item.event.tenant)
                self._queue.task_done()

    def _settled(self, tenant: str) -> None:
        self._undelivered[tenant] -= 1
        if self._undelivered[tenant] <= 0:
            del self._undelivered[tenant]  # bounded by the tenants with events waiting

    async def _deliver_until_done(self, batch: list[QueuedUsage]) -> None:
        """Deliver ``batch``, retrying with backoff until billing takes it, or sets an
        event it refuses aside."""
        backoff = 0.1
        attempt = 1
        while (err := await self._deliver(batch, attempt)) is not None:
            if _refused(err):
                await self._set_aside(batch)
                return
            log.warning(
                "billing delivery of %s failed (%s); retrying in %.1fs",
                _describe(batch),
                _reason(err),
                backoff,
            )
            metrics.BILLING_OUTBOX_RETRIES.inc()
            await asyncio.sleep(backoff)  # retry backoff, not on any request path
            backoff = min(backoff * 2, self._max_backoff)
            attempt += 1

    async def _set_aside(self, batch: list[QueuedUsage]) -> None:
        if len(batch) > 1:  # find the event billing refuses: deliver each alone
            for item in batch:
                await self._deliver_until_done([item])
            return
        event = batch[0].event
        self.rejected += 1
        log.error(
            "billing refused usage event %s as invalid; set aside, not billed: %s",
            event.event_id,
            text_format.MessageToString(event, as_one_line=True),
        )

    async def _next_batch(self) -> list[QueuedUsage]:
        """The oldest event, and the events already waiting behind it (up to
        ``max_batch`` in all); never waits for more to arrive."""
        batch = [await self._queue.get()]
        while len(batch) < self._max_batch and not self._queue.empty():
            batch.append(self._queue.get_nowait())
        return batch

    async def _deliver(self, batch: list[QueuedUsage], attempt: int) -> Exception | None:
        """One attempt; the error if it failed."""
        ids = [item.event.event_id for item in batch]
        attributes: dict[str, int | str | list[str]] = {
            "turnpike.attempt": attempt,
            "turnpike.billing.events": len(batch),
        }
        if len(ids) == 1:
            attributes["turnpike.billing.event_id"] = ids[0]
        else:
            attributes["turnpike.billing.event_ids"] = ids
        with tracer.start_as_current_span(
            "billing.deliver_usage",
            context=otel_context.Context(),  # a new trace, linked to the responses'
            links=[Link(item.origin) for item in batch if item.origin.is_valid],
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                await self._send([item.event for item in batch])
            except Exception as err:
                span.set_status(Status(StatusCode.ERROR, f"billing: {_reason(err)}"))
                if not isinstance(err, grpc.aio.AioRpcError):
                    log.warning("billing delivery failed unexpectedly", exc_info=err)
                return err
        self.delivered += len(batch)
        return None

    async def _send(self, events: list[billing_pb2.UsageEvent]) -> None:
        """Several events by one RecordUsageBatch; a lone one (or each one, against a
        billing from before that call) by RecordUsage."""
        if len(events) > 1 and self._batch_rpc:
            request = billing_pb2.RecordUsageBatchRequest(events=events)
            try:
                await self._stub.RecordUsageBatch(request, timeout=self._timeout)
                return
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                log.warning(
                    "billing has no RecordUsageBatch (an older version): one call per event"
                )
                self._batch_rpc = False
        for event in events:
            await self._stub.RecordUsage(event, timeout=self._timeout)

    async def close(self, timeout: float) -> None:
        """Try to deliver what is queued, then stop."""
        if self._task is None:
            return
        try:
            await asyncio.wait_for(self._queue.join(), timeout)
        except TimeoutError:
            log.error("billing outbox closed with %d undelivered usage events", self.pending)
        self._task.cancel()


def _refused(err: Exception) -> bool:
    return isinstance(err, grpc.aio.AioRpcError) and err.code() == grpc.StatusCode.INVALID_ARGUMENT


def _reason(err: Exception) -> str:
    return err.code().name if isinstance(err, grpc.aio.AioRpcError) else type(err).__name__


def _describe(batch: list[QueuedUsage]) -> str:
    first = batch[0].event.event_id
    return first if len(batch) == 1 else f"{first} and {len(batch) - 1} more"
