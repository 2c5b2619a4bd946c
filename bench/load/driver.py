"""N agent loops at once against the gateway: each loop plays ``Rollout``s back to back on
one connection of its own, chaining turns with ``previous_response_id``; a cell is one
transport at one N, metered for the CPU every process spent on it."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import httpx

from bench.load.stats import Tally, call_of, cell_record
from bench.load.transports import (
    HTTP,
    WEBSOCKET,
    Channel,
    Reply,
    SseChannel,
    TurnFailed,
    WsChannel,
    ws_url,
)
from bench.loop.rollout import Rollout
from bench.loop.stack import CpuMeter, Target
from bench.services.common import log

PROGRESS_EVERY_S = 5.0
SETTLE_LIMIT_S = 10.0
# A refusal that asks to be tried again (503 server_overloaded, 426 for a socket) is, as
# the official SDK does: up to RETRIES times, after the gateway's retry-after.
RETRIES = 2
RETRY_AFTER_S = 1.0

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class CellPlan:
    model: str
    turns: int  # per rollout
    stagger_s: float  # the loops start spread over this long
    turn_timeout_s: float


async def play(channel: Channel, rollout: Rollout, plan: CellPlan, tally: Tally) -> None:
    """One rollout on ``channel`` (opened first if it is not): the task, then every tool
    output with its nudge, until the last turn or the first error."""
    if not channel.is_open:
        start = time.perf_counter()
        try:
            await retried(channel.open, tally)
        except TurnFailed as err:
            tally.failed(err, turn=False)
            tally.loops_cut += 1
            return
        tally.connect_ms.append((time.perf_counter() - start) * 1000)
    items = rollout.first_input()
    previous: str | None = None
    for number in range(1, rollout.turns + 1):
        body = {
            "model": plan.model,
            "instructions": rollout.instructions,
            "tools": rollout.tools,
            "input": items,
        }
        if previous is not None:
            body["previous_response_id"] = previous
        tally.sent += 1
        try:
            async with asyncio.timeout(plan.turn_timeout_s):
                started = time.perf_counter()
                reply = await retried(functools.partial(channel.turn, body), tally)
                reply = waited(reply, started)
        except Exception as exc:  # TurnFailed, the timeout, or anything unforeseen
            error = _as_failure(exc, plan.turn_timeout_s)
            tally.failed(error, turn=True)
            tally.loops_cut += 1
            if not isinstance(exc, TurnFailed) or error.dropped:
                await channel.close()  # its state is unknown: the next rollout reconnects
            return
        tally.completed(reply)
        if number == rollout.turns:
            tally.loops_done += 1
            return
        call = call_of(reply.response)
        if call is None:
            tally.failed(TurnFailed("answered with a message before the last turn"), turn=False)
            tally.loops_cut += 1
            return
        previous = reply.response["id"]
        items = rollout.follow_up_input(number + 1, *call)


async def retried(attempt: Callable[[], Awaitable[T]], tally: Tally) -> T:
    """``attempt()``, again after ``RETRY_AFTER_S`` while it is refused as retryable (at
    most ``RETRIES`` times): each refusal counted apart from the errors."""
    for tries_left in range(RETRIES, -1, -1):
        try:
            return await attempt()
        except TurnFailed as err:
            if not err.retryable or not tries_left:
                raise
            tally.retried[err.kind] += 1
            await asyncio.sleep(RETRY_AFTER_S)
    raise AssertionError("unreachable")


def waited(reply: Reply, started: float) -> Reply:
    """The reply, its latency counted from the first attempt (a retry's wait included)."""
    since_first = (time.perf_counter() - started) * 1000
    if since_first - reply.turn_ms > 1.0:  # it was retried
        extra = since_first - reply.turn_ms
        return Reply(reply.turn_ms + extra, reply.ttft_ms + extra, reply.response)
    return reply


def _as_failure(exc: BaseException, timeout_s: float) -> TurnFailed:
    if isinstance(exc, TurnFailed):
        return exc
    if isinstance(exc, TimeoutError):
        return TurnFailed(f"no terminal event within {timeout_s:g} s")
    # Counted, never hidden; the traceback once in the log of this run.
    logger.exception("unexpected client error")
    return TurnFailed(f"client error: {type(exc).__name__}")


async def run_loop(
    channel: Channel, rollouts: list[Rollout], plan: CellPlan, tally: Tally, delay_s: float
) -> None:
    await asyncio.sleep(delay_s)
    try:
        for rollout in rollouts:
            await play(channel, rollout, plan, tally)
    finally:
        await channel.close()


def channel_factory(target: Target, transport: str) -> Callable[[], Channel]:
    """How each loop gets its own connection."""
    if transport == WEBSOCKET:
        url = ws_url(target.base_url)
        return lambda: WsChannel(url, target.api_key)
    if transport == HTTP:
        return lambda: SseChannel(target.base_url, target.api_key)
    raise ValueError(f"unknown transport {transport!r}")


async def _progress(label: str, tally: Tally, planned: int, start: float) -> None:
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        errors = sum(tally.errors.values())
        log(
            f"    {label}: {tally.ok}/{planned} turns in {time.perf_counter() - start:.0f} s"
            + (f", {errors} errors" if errors else "")
        )


async def settled_usage(target: Target) -> dict:
    """The tenant's billed totals (``GET /v1/usage``) once billing has caught up: the
    gateway bills in the background, and that work belongs to the turns just run (or
    after ``SETTLE_LIMIT_S``, with ``pending_events`` saying what is left)."""
    deadline = time.monotonic() + SETTLE_LIMIT_S
    headers = {"Authorization": f"Bearer {target.api_key}"}
    async with httpx.AsyncClient(timeout=10, headers=headers) as client:
        while True:
            reply = await client.get(target.base_url.rstrip("/") + "/usage")
            reply.raise_for_status()
            totals = reply.json()
            if not totals.get("pending_events") or time.monotonic() > deadline:
                return totals
            await asyncio.sleep(0.05)


def rollouts_for(corpus: dict[str, str], turns: int, count: int) -> list[Rollout]:
    return [Rollout(f"load_{uuid.uuid4().hex[:12]}", corpus, turns=turns) for _ in range(count)]


async def run_cell(
    target: Target,
    meter: CpuMeter,
    transport: str,
    loops: int,
    rollouts_per_loop: int,
    plan: CellPlan,
    corpus: dict[str, str],
) -> dict:
    """``loops`` loops at once, each playing ``rollouts_per_loop`` rollouts. The meters run
    from the first connect to the last terminal event, plus billing's catch-up; rollouts and
    clients are made before."""
    work = [rollouts_for(corpus, plan.turns, rollouts_per_loop) for _ in range(loops)]
    planned = loops * rollouts_per_loop * plan.turns
    tally = Tally()
    before = await settled_usage(target)
    channel = channel_factory(target, transport)
    meter.start()
    cpu_start = time.process_time()
    start = time.perf_counter()
    ticker = asyncio.create_task(_progress(f"{transport}, {loops} loops", tally, planned, start))
    try:
        await asyncio.gather(
            *(
                run_loop(channel(), work[i], plan, tally, plan.stagger_s * i / loops)
                for i in range(loops)
            )
        )
    finally:
        ticker.cancel()
    wall_s = time.perf_counter() - start
    client_cpu_ms = (time.process_time() - cpu_start) * 1000
    after = await settled_usage(target)
    service_cpu_ms = meter.stop()
    extra = {
        "billed_responses": after["responses"] - before["responses"],
        "billing_pending_after": after.get("pending_events", 0),
    }
    return cell_record(
        transport,
        loops,
        rollouts_per_loop,
        plan.turns,
        tally,
        wall_s,
        client_cpu_ms,
        service_cpu_ms,
        extra,
    )


async def idle_cpu(meter: CpuMeter, seconds: float) -> dict[str, float]:
    """CPU ms per second each process spends with no traffic (health checks, timers)."""
    meter.start()
    await asyncio.sleep(seconds)
    return {k: round(v / seconds, 2) for k, v in sorted(meter.stop().items())}
