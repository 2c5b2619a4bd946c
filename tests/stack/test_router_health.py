"""The router's health polling (turnpike.router.health) against real gRPC servers: a worker that
starts after the router began probing it is seen by the first check once it serves.

Each failed connection lengthens a gRPC channel's reconnect backoff; a probe whose
channel sat in a long backoff kept reporting a worker down for seconds after it came up,
and a stack just started answered its first request 503 "no healthy worker" (seen in
tests/stack/test_peer_bugs.py)."""

from __future__ import annotations

import asyncio
import time

from support.fake_worker import fake_worker
from support.procs import free_port

from turnpike.router.health import HealthMonitor
from turnpike.router.routing import Worker, WorkerRouter

LATE_WORKERS = 4  # each would be missed about half the time with the old backoff
PROBING_S = 6.0  # long enough for the backoff to reach its ceiling


async def test_workers_that_start_late_are_seen_by_the_next_check() -> None:
    ports = [free_port() for _ in range(LATE_WORKERS)]
    router = WorkerRouter([Worker(f"w{i}", f"127.0.0.1:{port}") for i, port in enumerate(ports)])
    monitor = HealthMonitor(router, interval_s=1.0)
    servers = []
    try:
        deadline = time.monotonic() + PROBING_S
        while time.monotonic() < deadline:
            await monitor.check_now()
            assert not router.any_healthy()
            await asyncio.sleep(0.2)
        servers = [await fake_worker(port) for port in ports]
        await monitor.check_now()
        down = [w.id for w in router.workers if not w.healthy]
        assert not down, f"serving but reported down: {down}"
    finally:
        for server in servers:
            await server.stop(None)
        await monitor.close()
