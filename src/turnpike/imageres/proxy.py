"""The legacy hop: forward a generation to a worker and relay its event stream.

Upstream failures become an ``Error`` event in the relayed stream (the stream contract is
"items, then exactly one Finished or Error"), never an RPC failure of the proxy itself.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncGenerator

import grpc

from turnpike.grpc_client import insecure_channel
from turnpike.inference.v1 import inference_pb2
from turnpike.inference.v1.inference_pb2_grpc import InferenceStub

log = logging.getLogger(__name__)


# Channels kept open at once: far more than a deployment has workers, so eviction only
# happens when callers name many addresses (each would otherwise be kept forever).
MAX_CHANNELS = 64
# An evicted channel's calls still running get this long to finish before it closes.
EVICTED_GRACE_S = 300.0


class WorkerChannels:
    """One long-lived channel per worker address, so every proxied call reuses an open
    HTTP/2 connection instead of paying a handshake; at most ``capacity`` of them, the
    least recently used closed first."""

    def __init__(self, capacity: int = MAX_CHANNELS) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[str, tuple[grpc.aio.Channel, InferenceStub]] = OrderedDict()
        # Evicted channels closing in the background (kept referenced until done).
        self._closing: set[asyncio.Task[None]] = set()

    def stub(self, address: str) -> InferenceStub:
        entry = self._entries.get(address)
        if entry is not None:
            self._entries.move_to_end(address)
            return entry[1]
        channel = insecure_channel(address)
        stub = InferenceStub(channel)
        self._entries[address] = (channel, stub)
        while len(self._entries) > self.capacity:
            _, (evicted, _) = self._entries.popitem(last=False)
            task = asyncio.create_task(evicted.close(grace=EVICTED_GRACE_S))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        return stub

    async def close(self) -> None:
        channels = [channel for channel, _ in self._entries.values()]
        self._entries.clear()
        for channel in channels:
            await channel.close()
        for task in list(self._closing):
            task.cancel()  # shutting down: the process will not wait out their grace
        await asyncio.gather(*self._closing, return_exceptions=True)


# host:port, the host a name or an IPv4 address, or an IPv6 one in brackets: what the
# router hands out. Anything else would be resolved (a DNS wait on the caller's deadline)
# and kept as a channel of its own.
WORKER_ADDRESS_RE = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]+\]):(\d{1,5})$"
)


def is_worker_address(address: str) -> bool:
    match = WORKER_ADDRESS_RE.match(address)
    return match is not None and 1 <= int(match.group(1)) <= 65535


def error_event(code: str, message: str, retryable: bool) -> inference_pb2.GenerateEvent:
    return inference_pb2.GenerateEvent(
        error=inference_pb2.Error(code=code, message=message, retryable=retryable)
    )


async def relay_generate(
    stub: InferenceStub,
    address: str,
    request: inference_pb2.GenerateRequest,
    time_limit_s: float | None = None,
) -> AsyncGenerator[inference_pb2.GenerateEvent, None]:
    """Yield the worker's events as they arrive. If the consumer stops early (the caller
    cancelled), the upstream call is cancelled too."""
    call = stub.Generate(request, timeout=time_limit_s)
    relayed = 0
    finished = False
    try:
        async for event in call:
            relayed += 1
            finished = event.WhichOneof("event") in ("finished", "error")
            yield event
    except grpc.aio.AioRpcError as exc:
        if finished:
            # The caller already has its final event; a late failure changes nothing for it.
            log.warning("worker %s failed after its final event: %s", address, exc.code())
        else:
            yield _upstream_error(exc, address, relayed)
        return
    finally:
        # Covers cancellation and early close of this generator: never leave the worker
        # generating for a caller that is gone.
        if not call.done():
            call.cancel()
    if not finished:
        yield error_event(
            "backend_error", f"worker {address} ended the stream without a final event", False
        )


def _upstream_error(
    exc: grpc.aio.AioRpcError, address: str, relayed: int
) -> inference_pb2.GenerateEvent:
    code = exc.code()
    log.warning("worker %s failed after %d events: %s %s", address, relayed, code, exc.details())
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        # Safe to retry elsewhere only if the caller has seen nothing of this attempt yet.
        return error_event(
            "backend_unavailable",
            f"worker {address} unavailable: {exc.details() or code.name}",
            retryable=relayed == 0,
        )
    return error_event(
        "backend_error", f"worker {address} failed: {code.name}: {exc.details()}", False
    )
