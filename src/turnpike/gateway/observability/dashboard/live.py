"""Sampling while someone watches: the dashboard's clock, its registry reads and its
backend health checks.

Nothing runs until the first dashboard request. Then a task snapshots the registry every
``interval_s`` into the ``Sampler``'s ring; after ``idle_s`` without a request it stops
and forgets the ring, so an unwatched gateway pays nothing. Backend health is asked of
the gateway at most once per ``health_ttl_s``, however many pages poll.

Each gateway process samples on its own (the registry it reads is the sum over every
process in multiprocess mode, so each shows the whole gateway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from prometheus_client import Metric

from turnpike.gateway.observability.dashboard.sampler import Sampler, StageOrder, take_snapshot

log = logging.getLogger(__name__)

Collect = Callable[[], Iterable[Metric]]
Readiness = Callable[[], Awaitable[tuple[bool, dict[str, Any]]]]


class LiveDashboard:
    def __init__(
        self,
        collect: Collect,
        readiness: Readiness,
        stage_order: StageOrder | None = None,
        *,
        interval_s: float = 2.0,
        keep_s: float = 300.0,
        idle_s: float = 180.0,
        health_ttl_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._collect = collect
        self._readiness = readiness
        self._stage_order = stage_order or {}
        self.sampler = Sampler(interval_s, keep_s)
        self.idle_s = idle_s
        self.health_ttl_s = health_ttl_s
        self._clock = clock
        self._last_request = -float("inf")
        self._task: asyncio.Task[None] | None = None
        self._health: dict[str, Any] | None = None
        self._health_at = -float("inf")
        self._health_lock = asyncio.Lock()

    @property
    def sampling(self) -> bool:
        return self._task is not None and not self._task.done()

    def touch(self) -> None:
        """Someone is looking: sample (again) until ``idle_s`` passes without this."""
        self._last_request = self._clock()
        if not self.sampling:
            self._task = asyncio.create_task(self._run(), name="dashboard-sampler")

    async def data(self) -> dict[str, Any]:
        """The page's JSON: the sampler's view and the backends' health."""
        self.touch()
        if not self.sampler.ring:
            await self._sample()  # the first request shows the totals at once
        return {**self.sampler.view(self._stage_order), "health": await self.health()}

    async def health(self) -> dict[str, Any]:
        async with self._health_lock:
            if self._health is None or self._clock() - self._health_at >= self.health_ttl_s:
                ready, details = await self._readiness()
                self._health = {"ready": ready, **details}
                self._health_at = self._clock()
            return self._health

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _sample(self) -> None:
        ring = self.sampler.ring
        if ring and self._clock() - ring[-1].t < self.sampler.interval_s / 2:
            return  # just taken: a rate over a sliver of time would only be noise
        # In multiprocess mode collecting reads every process's files: off the loop.
        families = await asyncio.to_thread(lambda: list(self._collect()))
        self.sampler.add(take_snapshot(families, self._clock()))

    async def _run(self) -> None:
        try:
            while self._clock() - self._last_request < self.idle_s:
                await asyncio.sleep(self.sampler.interval_s)
                try:
                    await self._sample()
                except Exception:  # a bad read must not stop the page for good
                    log.exception("dashboard: reading the metrics failed")
        finally:
            self.sampler.clear()
