"""gRPC adapter over the ledger. All database work runs on one dedicated thread; writes are
group-committed (``turnpike.billing.group_commit``): every event that arrives while a commit is in
flight goes into the next one, and each call is answered once the commit holding its events
is durable."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import grpc

from turnpike.billing import metrics
from turnpike.billing.group_commit import GroupCommit
from turnpike.billing.ledger import Ledger, UsageEvent, UsageTotals
from turnpike.billing.v1 import billing_pb2, billing_pb2_grpc

log = logging.getLogger(__name__)

T = TypeVar("T")

# Events one RecordUsageBatch may carry: bounds one call's transaction and message.
MAX_BATCH_EVENTS = 1000


class LedgerThread:
    """Owns the ledger on a single-thread executor: the connection is opened, used and closed
    on that thread only, calls are serialised in arrival order, and the event loop never
    waits on disk. Writes waiting together share one transaction (one fsync) and one hop to
    the thread."""

    def __init__(self, path: str | Path) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="billing-ledger")
        try:
            # Blocking on purpose: a ledger that cannot open must fail the start, before the
            # service reports SERVING.
            self._ledger = self._executor.submit(Ledger.open, path).result()
        except BaseException:
            self._executor.shutdown(wait=False)
            raise
        self._commits: GroupCommit[UsageEvent, bool] = GroupCommit(self._record_group)

    async def _run(self, fn: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def _record_group(self, events: list[UsageEvent]) -> list[bool]:
        return await self._run(self._commit, events)

    def _commit(self, events: list[UsageEvent]) -> list[bool]:
        """One group commit, on the ledger thread, measured."""
        started = time.perf_counter()
        billed_before = self._ledger.record_many(events)
        metrics.COMMIT_SECONDS.observe(time.perf_counter() - started)
        metrics.COMMIT_BATCH_SIZE.observe(len(events))
        ignored = sum(billed_before)
        metrics.REDELIVERIES_IGNORED.inc(ignored)
        metrics.EVENTS_RECORDED.inc(len(events) - ignored)
        return billed_before

    async def record(self, event: UsageEvent) -> bool:
        """Whether ``event`` was already billed, once its commit is durable."""
        [duplicate] = await self._commits.submit([event])
        return duplicate

    async def record_many(self, events: Sequence[UsageEvent]) -> list[bool]:
        """``record`` for several events, all in the same commit."""
        return await self._commits.submit(events) if events else []

    async def usage(self, tenant: str) -> UsageTotals:
        return await self._run(self._ledger.usage, tenant)

    async def close(self) -> None:
        # Every accepted write commits first.
        await self._commits.close()
        await self._run(self._ledger.close)
        self._executor.shutdown(wait=True)


def totals_to_pb(totals: UsageTotals) -> billing_pb2.UsageTotals:
    return billing_pb2.UsageTotals(
        tenant=totals.tenant,
        responses=totals.responses,
        input_tokens=totals.input_tokens,
        cached_tokens=totals.cached_tokens,
        output_tokens=totals.output_tokens,
        by_model=[
            billing_pb2.ModelUsage(
                model=m.model,
                responses=m.responses,
                input_tokens=m.input_tokens,
                cached_tokens=m.cached_tokens,
                output_tokens=m.output_tokens,
            )
            for m in totals.by_model
        ],
    )


def event_from_pb(event: billing_pb2.UsageEvent) -> UsageEvent:
    return UsageEvent(
        event_id=event.event_id,
        tenant=event.tenant,
        model=event.model,
        input_tokens=event.input_tokens,
        cached_tokens=event.cached_tokens,
        output_tokens=event.output_tokens,
        created_at=event.created_at,
    )


class BillingServicer(billing_pb2_grpc.BillingServicer):
    def __init__(self, ledger: LedgerThread) -> None:
        self._ledger = ledger

    async def RecordUsage(
        self, request: billing_pb2.UsageEvent, context: grpc.aio.ServicerContext
    ) -> billing_pb2.RecordUsageResponse:
        [duplicate] = await self._record([request], context, batch=False)
        return billing_pb2.RecordUsageResponse(duplicate=duplicate)

    async def RecordUsageBatch(
        self, request: billing_pb2.RecordUsageBatchRequest, context: grpc.aio.ServicerContext
    ) -> billing_pb2.RecordUsageBatchResponse:
        if len(request.events) > MAX_BATCH_EVENTS:
            metrics.EVENTS_REJECTED.inc(len(request.events))
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{len(request.events)} events in one batch; at most {MAX_BATCH_EVENTS}",
            )
        duplicates = await self._record(request.events, context, batch=True)
        return billing_pb2.RecordUsageBatchResponse(duplicate=duplicates)

    async def _record(
        self,
        messages: Sequence[billing_pb2.UsageEvent],
        context: grpc.aio.ServicerContext,
        *,
        batch: bool,
    ) -> list[bool]:
        """Validate every event (all or none are recorded), then record them in one commit."""
        events = [event_from_pb(m) for m in messages]
        try:
            for i, event in enumerate(events):
                try:
                    event.validate()
                except ValueError as exc:
                    raise ValueError(f"events[{i}]: {exc}" if batch else str(exc)) from None
            return await self._ledger.record_many(events)
        except ValueError as exc:
            metrics.EVENTS_REJECTED.inc(len(events))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except sqlite3.Error as exc:
            log.exception(
                "ledger write failed for %d event(s), from %s", len(events), events[0].event_id
            )
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"ledger write failed: {exc}")
        raise AssertionError("unreachable: abort raises")

    async def GetUsage(
        self, request: billing_pb2.GetUsageRequest, context: grpc.aio.ServicerContext
    ) -> billing_pb2.UsageTotals:
        if not request.tenant:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "tenant must not be empty")
        try:
            totals = await self._ledger.usage(request.tenant)
        except sqlite3.Error as exc:
            log.exception("ledger read failed for tenant %s", request.tenant)
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"ledger read failed: {exc}")
        return totals_to_pb(totals)
