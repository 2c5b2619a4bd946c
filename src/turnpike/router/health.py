"""Background health polling of the workers (standard gRPC health, Inference service).

One round checks every worker concurrently and marks it up or down at once: a worker
that stops answering SERVING (crashed, or draining after SIGTERM) leaves the pool on
the next round, and its conversations move on their next route.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import grpc

from turnpike import grpc_client
from turnpike.inference.v1 import inference_pb2
from turnpike.router.routing import WorkerRouter

log = logging.getLogger(__name__)

INFERENCE_SERVICE = inference_pb2.DESCRIPTOR.services_by_name["Inference"].full_name


class HealthMonitor:
    def __init__(self, router: WorkerRouter, interval_s: float) -> None:
        if interval_s <= 0:
            raise ValueError("health interval must be > 0")
        self._router = router
        self._interval = interval_s
        # A check must finish within the interval, but allow a loaded peer a moment.
        self._timeout = max(0.2, min(1.0, interval_s))
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._round: asyncio.Task[None] | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._reported: set[str] = set()  # workers whose state was logged once

    def start(self) -> None:
        """Start polling (needs a running event loop); the first round runs at once."""
        if self._loop_task is None:
            self._loop_task = asyncio.get_running_loop().create_task(self._poll())

    async def check_now(self) -> None:
        """Run one round, or join the one in progress (callers never stampede)."""
        if self._round is None or self._round.done():
            self._round = asyncio.get_running_loop().create_task(self._check_all())
        await asyncio.shield(self._round)

    async def close(self) -> None:
        for task in (self._loop_task, self._round):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    async def _poll(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.check_now()
            except Exception:  # keep polling whatever one round does
                log.exception("health round failed")
            await asyncio.sleep(max(0.0, self._interval - (time.monotonic() - started)))

    async def _check_all(self) -> None:
        workers = self._router.workers
        results = await asyncio.gather(*(self._check(w.id, w.address) for w in workers))
        for worker, healthy in zip(workers, results, strict=True):
            changed = self._router.set_health(worker.id, healthy)
            if changed or worker.id not in self._reported:
                self._reported.add(worker.id)
                log.info(
                    "worker %s (%s) is %s", worker.id, worker.address, "up" if healthy else "DOWN"
                )

    async def _check(self, worker_id: str, address: str) -> bool:
        channel = self._channels.get(worker_id)
        if channel is None:
            # Reconnecting within half a check's wait: a worker that just started is
            # seen by the next check, not once a long backoff ends.
            channel = self._channels[worker_id] = grpc_client.insecure_channel(
                address, max_reconnect_backoff_s=self._timeout / 2
            )
        return await grpc_client.check_health(channel, INFERENCE_SERVICE, timeout=self._timeout)
