"""The legacy hop: forward a generation to a worker and relay its event stream.

Upstream failures become an ``Error`` event in the relayed stream (the stream contract is
"items, then exactly one Finished or Error"), never an RPC failure of the proxy itself.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator

import grpc
from turnpike.grpc_client import insecure_channel
from turnpike.inference.v1 import inference_pb2, inference_pb2_grpc

log = logging.getLogger(__name__)


class WorkerChannels:
    """One long-lived channel per worker address, so every proxied call reuses an open
    HTTP/2 connection instead of paying a handshake."""

    def __init__(self) -> None:
        self._stubs: dict[str, inference_pb2_grpc.InferenceStub] = {}
        self._channels: dict[str, grpc.aio.Channel] = {}

    def stub(self, address: str) -> inference_pb2_grpc.InferenceStub:
        stub = self._stubs.get(address)
        if stub is None:
            channel = insecure_channel(address)
            self._channels[address] = channel
            stub = self._stubs[address] = inference_pb2_grpc.InferenceStub(channel)
        return stub

    async def close(self) -> None:
        channels = list(self._channels.values())
        self._channels.clear()
        self._stubs.clear()
        for channel in channels:
            await channel.close()


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
    stub: inference_pb2_grpc.InferenceStub,
    address: str,
    request: inference_pb2.GenerateRequest,
    time_limit_s: float | None = None,
) -> AsyncIterator[inference_pb2.GenerateEvent]:
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
