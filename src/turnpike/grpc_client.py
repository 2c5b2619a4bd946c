"""Client channels to Turnpike services, with tracing and health probes."""

from __future__ import annotations

import asyncio
import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from turnpike import telemetry
from turnpike.config import grpc_max_message_bytes
from turnpike.grpc_tracing import TracedChannel

_OPTIONS = [
    # Fail fast and reconnect quickly when a peer restarts.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 2000),
    # A restarted container may come back at a new address: re-resolve names quickly.
    ("grpc.dns_min_time_between_resolutions_ms", 1000),
]


def insecure_channel(
    address: str, max_reconnect_backoff_s: float | None = None
) -> grpc.aio.Channel:
    """A channel with the project's options. ``max_reconnect_backoff_s`` lowers the ceiling
    of its reconnect backoff: a health probe's channel must try again at least as often
    as a probe waits (``check_health``), or a peer that came up is reported down until
    the backoff ends."""
    # The servers' limit too (TURNPIKE_GRPC_MAX_MESSAGE_BYTES): one setting, both ends.
    limit = grpc_max_message_bytes()
    options = {
        "grpc.max_receive_message_length": limit,
        "grpc.max_send_message_length": limit,
        **dict(_OPTIONS),
    }
    if max_reconnect_backoff_s is not None:
        ceiling_ms = max(1, int(max_reconnect_backoff_s * 1000))
        options["grpc.max_reconnect_backoff_ms"] = ceiling_ms
        initial_ms = options["grpc.initial_reconnect_backoff_ms"]
        options["grpc.initial_reconnect_backoff_ms"] = min(initial_ms, ceiling_ms)
    channel = grpc.aio.insecure_channel(address, options=list(options.items()))
    # Traced by a wrapper, not interceptors (turnpike.grpc_tracing says why).
    return TracedChannel(channel) if telemetry.enabled() else channel  # type: ignore[return-value]


async def check_health(channel: grpc.aio.Channel, service: str = "", timeout: float = 1.0) -> bool:
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        # wait_for_ready: a channel still in reconnect backoff after a peer (re)started
        # waits for the connection instead of failing at once.
        reply = await stub.Check(
            health_pb2.HealthCheckRequest(service=service), timeout=timeout, wait_for_ready=True
        )
    except grpc.aio.AioRpcError:
        return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


async def wait_healthy(address: str, timeout: float = 30.0, service: str = "") -> bool:
    """Poll a service's health until SERVING or the timeout passes."""
    deadline = time.monotonic() + timeout
    async with grpc.aio.insecure_channel(address) as channel:
        while time.monotonic() < deadline:
            if await check_health(channel, service, timeout=1.0):
                return True
            await asyncio.sleep(0.1)
    return False
