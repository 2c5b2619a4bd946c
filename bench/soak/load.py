"""The soak's load: agent loops over WebSocket and HTTP/SSE, every turn let through by one
pacer shared by all loops, so the stack sees a steady rate of turns (not as many as it
can take) for as long as the run lasts. Each loop plays fresh rollouts back to back, so
new conversations keep arriving and the stores and caches must evict to stay bounded."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from bench.load.driver import CellPlan, channel_factory, play, rollouts_for
from bench.load.stats import Tally
from bench.load.transports import TRANSPORTS, Channel, Reply
from bench.loop.stack import Target


class Pacer:
    """Hands out turn slots ``1 / rate`` seconds apart. A slot missed (every loop was
    busy) is not made up later: the rate stays steady instead of bursting."""

    def __init__(self, rate_per_s: float) -> None:
        self.interval = 1.0 / rate_per_s
        self._next = time.monotonic()
        self._lock = asyncio.Lock()

    async def wait(self) -> None:
        async with self._lock:
            now = time.monotonic()
            self._next = max(self._next, now)
            slot = self._next
            self._next += self.interval
        if (delay := slot - time.monotonic()) > 0:
            await asyncio.sleep(delay)


class PacedChannel:
    """A channel whose every turn waits for the pacer first."""

    def __init__(self, inner: Channel, pacer: Pacer) -> None:
        self.inner = inner
        self.pacer = pacer

    @property
    def is_open(self) -> bool:
        return self.inner.is_open

    async def open(self) -> None:
        await self.inner.open()

    async def turn(self, body: dict[str, Any]) -> Reply:
        await self.pacer.wait()
        return await self.inner.turn(body)

    async def close(self) -> None:
        await self.inner.close()


@dataclass(frozen=True)
class SoakPlan:
    duration_s: float
    loops: int  # split evenly between the transports
    rate_per_s: float
    turns: int  # per rollout
    model: str = "turnpike-sim"
    turn_timeout_s: float = 60.0


async def soak_loop(
    target: Target, transport: str, plan: SoakPlan, corpus: dict[str, str], pacer: Pacer,
    tally: Tally, deadline: float,
) -> None:  # fmt: skip
    """Fresh rollouts on one connection until the deadline (the rollout under way ends
    first); a connection that failed is opened anew by the next rollout."""
    channel = PacedChannel(channel_factory(target, transport)(), pacer)
    cell = CellPlan(plan.model, plan.turns, 0.0, plan.turn_timeout_s)
    try:
        while time.monotonic() < deadline:
            (rollout,) = rollouts_for(corpus, plan.turns, 1)
            await play(channel, rollout, cell, tally)
    finally:
        await channel.close()


async def run_load(
    target: Target, plan: SoakPlan, corpus: dict[str, str], tallies: dict[str, Tally]
) -> None:
    """The loops, alternating transports, until ``plan.duration_s`` has passed."""
    pacer = Pacer(plan.rate_per_s)
    deadline = time.monotonic() + plan.duration_s
    loops = []
    for i in range(plan.loops):
        transport = TRANSPORTS[i % len(TRANSPORTS)]
        tally = tallies.setdefault(transport, Tally())
        loops.append(soak_loop(target, transport, plan, corpus, pacer, tally, deadline))
    await asyncio.gather(*loops)
