"""The machine's unit of CPU: one empty unary gRPC round trip between two processes (a
*hop*), measured in the same run as the load it divides.

Why this unit: a turn's API work is a handful of gRPC hops plus what the services do
between them, and a hop's cost moves with the machine (clock, cache, kernel, the
hypervisor's scheduling) the way the stack's costs do. A figure in hops says how many
round trips' worth of CPU a turn takes, which holds from one machine to the next where
milliseconds do not. It is fixed code, independent of the stack's: ``grpcio``'s asyncio
API on the standard event loop both ends, a generic handler with empty messages, so a
change to the stack never moves its own yardstick.

The same run measures one message each way on a bidirectional stream that stays open
(the cost a persistent stream pays per exchange instead of a call), to weigh the two.

``python -m bench.load.machine_unit`` prints both; ``make bench-load`` records the unit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass

import grpc

SERVICE = "turnpike.bench.Reference"
UNARY = f"/{SERVICE}/Empty"
STREAM = f"/{SERVICE}/Echo"
CALLS = 3000  # per measurement: /proc counts CPU in 10 ms ticks, so ~1% resolution
WARMUP_CALLS = 300
REPEATS = 3


def _identity(data: bytes) -> bytes:
    return data


async def _empty(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
    return b""


async def _echo(
    requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
) -> AsyncIterator[bytes]:
    async for request in requests:
        yield request


async def serve(port: int) -> None:
    """The far end: answers both methods until its stdin closes."""
    server = grpc.aio.server()
    handlers = {
        "Empty": grpc.unary_unary_rpc_method_handler(
            _empty, request_deserializer=_identity, response_serializer=_identity
        ),
        "Echo": grpc.stream_stream_rpc_method_handler(
            _echo, request_deserializer=_identity, response_serializer=_identity
        ),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(bound, flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await server.stop(0)


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Exchange:
    """One way of asking and being answered, measured ``calls`` times in a row."""

    cpu_ms: float  # both processes' CPU per exchange (user + system)
    client_cpu_ms: float
    server_cpu_ms: float
    wall_ms: float


@dataclass(frozen=True)
class MachineUnit:
    hop: Exchange  # an empty unary round trip: the unit
    stream_message: Exchange  # one message each way on a stream that stays open
    calls: int
    repeats: int

    @property
    def hop_cpu_ms(self) -> float:
        return self.hop.cpu_ms

    def as_dict(self) -> dict[str, object]:
        return asdict(self) | {"hop_cpu_ms": self.hop_cpu_ms}


async def _measure(
    server_pid: int, calls: int, exchange: Callable[[], Awaitable[object]]
) -> Exchange:
    for _ in range(WARMUP_CALLS):
        await exchange()
    client0, server0, wall0 = time.process_time(), _cpu_s(server_pid), time.perf_counter()
    for _ in range(calls):
        await exchange()
    wall = time.perf_counter() - wall0
    client, server = time.process_time() - client0, _cpu_s(server_pid) - server0
    per = 1000 / calls
    return Exchange(
        round((client + server) * per, 4),
        round(client * per, 4),
        round(server * per, 4),
        round(wall * per, 4),
    )


def _median(samples: list[Exchange]) -> Exchange:
    """The sample of median total CPU (a whole sample, so its parts add up)."""
    return sorted(samples, key=lambda s: s.cpu_ms)[len(samples) // 2]


async def _run(server_pid: int, port: int, calls: int, repeats: int) -> MachineUnit:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        await asyncio.wait_for(channel.channel_ready(), 10)
        unary = channel.unary_unary(UNARY, request_serializer=_identity)
        stream = channel.stream_stream(STREAM, request_serializer=_identity)
        call = stream()

        async def ask_unary() -> object:
            return await unary(b"")

        async def ask_stream() -> object:
            await call.write(b"")
            return await call.read()

        hops, messages = [], []
        # Alternated, so drift on the machine hits both alike.
        for _ in range(repeats):
            hops.append(await _measure(server_pid, calls, ask_unary))
            messages.append(await _measure(server_pid, calls, ask_stream))
        await call.done_writing()
    return MachineUnit(_median(hops), _median(messages), calls, repeats)


def measure(calls: int = CALLS, repeats: int = REPEATS) -> MachineUnit:
    """Start the far end as a process of its own, measure, stop it."""
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.load.machine_unit", "--serve"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        return asyncio.run(_run(server.pid, port, calls, repeats))
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(5)
        except subprocess.TimeoutExpired:
            server.kill()


def spread(samples: list[float]) -> str:
    return (
        f"median {statistics.median(samples):.4f}, min {min(samples):.4f}, max {max(samples):.4f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser("python -m bench.load.machine_unit", description=__doc__)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=CALLS, help=f"per measurement ({CALLS})")
    parser.add_argument("--repeats", type=int, default=REPEATS, help=f"alternated ({REPEATS})")
    args = parser.parse_args(argv)
    if args.serve:
        asyncio.run(serve(0))
        return 0
    print(json.dumps(measure(args.calls, args.repeats).as_dict(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
