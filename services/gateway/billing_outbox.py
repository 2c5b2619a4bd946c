"""At-least-once delivery of usage events to the billing service.

Events wait in a queue and are retried with backoff until billing
acknowledges them; the ledger is idempotent on the response id, so a
redelivery is never billed twice. A billing outage delays records, it does
not lose them (while the gateway process lives; a shared tier makes the
queue durable across gateway restarts).
"""

from __future__ import annotations

import asyncio
import logging

import grpc
from turnpike.billing.v1 import billing_pb2, billing_pb2_grpc

log = logging.getLogger(__name__)


class BillingOutbox:
    def __init__(
        self,
        stub: billing_pb2_grpc.BillingStub,
        timeout_s: float = 5.0,
        max_backoff_s: float = 5.0,
    ) -> None:
        self._stub = stub
        self._timeout = timeout_s
        self._max_backoff = max_backoff_s
        self._queue: asyncio.Queue[billing_pb2.UsageEvent] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self.delivered = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="billing outbox")

    def submit(self, event: billing_pb2.UsageEvent) -> None:
        self._queue.put_nowait(event)

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    async def record_now(self, event: billing_pb2.UsageEvent) -> None:
        """Deliver on the caller's path; on failure fall back to the queue."""
        try:
            await self._stub.RecordUsage(event, timeout=self._timeout)
            self.delivered += 1
        except grpc.aio.AioRpcError as err:
            log.warning("billing unavailable (%s); queued %s", err.code(), event.event_id)
            self.submit(event)

    async def _run(self) -> None:
        while True:
            event = await self._queue.get()
            backoff = 0.1
            while True:
                try:
                    await self._stub.RecordUsage(event, timeout=self._timeout)
                    self.delivered += 1
                    break
                except grpc.aio.AioRpcError as err:
                    log.warning(
                        "billing delivery of %s failed (%s); retrying in %.1fs",
                        event.event_id,
                        err.code(),
                        backoff,
                    )
                    await asyncio.sleep(backoff)  # retry backoff, not on any request path
                    backoff = min(backoff * 2, self._max_backoff)
            self._queue.task_done()

    async def close(self, timeout: float) -> None:
        """Try to deliver what is queued, then stop."""
        if self._task is None:
            return
        try:
            await asyncio.wait_for(self._queue.join(), timeout)
        except TimeoutError:
            log.error("billing outbox closed with %d undelivered usage events", self.pending)
        self._task.cancel()
