"""Load: what one connection carries at the fastest model speed, and many agent loops at once.

(a) Throughput on one WebSocket connection at 4,000 tokens/s. The simulator's usual
answers are short (a call's arguments are 10-20 tokens, a message 20-80), but it writes
about as many tokens as the user asks for ("... in 7000 words"). Several such answers
run back to back on the same socket, each continuing the previous with
``previous_response_id``. Reported per turn: the client-observed decode rate (output
tokens over the time from the first delta event to the last), beside the configured rate
and the rate the worker reports for itself (tokens over its decode time).

(b) Many concurrent agent loops (connection mode over WebSocket, one socket each) at
1,000 tokens/s on short rollouts, started a few milliseconds apart. Reported: per-turn
API overhead (median, p90) under load against the same rollout run alone, and the
aggregate tokens per second the stack delivered.

(c) The capacity sweep: the same at fewer loops at once (2, 5, 10, ...), to show how many
loops this machine carries within 2x of one alone, beside the CPU each turn costs.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from dataclasses import dataclass
from typing import Any

from bench.loop.rollout import Rollout
from bench.loop.variants import (
    CONNECTION,
    PIPELINE_HEADER,
    TERMINAL,
    Loop,
    LoopError,
    WsSession,
    run_loop,
)
from bench.services.common import log, percentile

# The simulator writes about as many tokens as a user asks for ("in 2000 words").
LONG_ASKS = (
    "Explain how the gateway stores responses and continues conversations, in {n} words.",
    "Now describe the WebSocket connection cache and what it keeps, in {n} words.",
    "Walk through the safety stack and how it scores a conversation, in {n} words.",
    "Describe how the router picks a worker and why affinity matters, in {n} words.",
    "Summarize the whole request path from the SDK to the worker, in {n} words.",
)


@dataclass(frozen=True)
class LoadParams:
    stream_model: str = "turnpike-sim-4000"
    stream_turns: int = 5
    stream_tokens: int = 7000  # output tokens per turn, roughly
    loops: int = 50
    loop_turns: int = 8
    loop_model: str = "turnpike-sim"
    loop_tool_ms: tuple[float, ...] = (0.0, 30.0)
    single_reps: int = 3
    stagger_s: float = 0.5  # the concurrent loops start spread over this long
    # Loop counts of the capacity sweep (tool time: the first of loop_tool_ms).
    sweep: tuple[int, ...] = (2, 5, 10, 20, 35)


async def one_connection_throughput(client, params: LoadParams) -> dict[str, Any]:
    """(a): long answers back to back on one socket, each continuing the last."""
    turns: list[dict[str, Any]] = []
    headers = {PIPELINE_HEADER: "connection"}
    instructions = f"Session {uuid.uuid4().hex[:12]}. Answer at the length asked for."
    async with client.responses.connect(extra_headers=headers) as conn:
        previous = None
        for number in range(1, params.stream_turns + 1):
            ask = LONG_ASKS[(number - 1) % len(LONG_ASKS)].format(n=params.stream_tokens)
            body: dict[str, Any] = {
                "model": params.stream_model,
                "instructions": instructions,
                "input": [{"role": "user", "content": ask}],
            }
            if previous is not None:
                body["previous_response_id"] = previous.id
            start = time.perf_counter()
            first = last = None
            deltas = 0
            await conn.response.create(**body)
            async for event in conn:
                if event.type.endswith(".delta"):
                    last = time.perf_counter()
                    first = first or last
                    deltas += 1
                elif event.type in TERMINAL:
                    end = time.perf_counter()
                    if event.type not in ("response.completed", "response.incomplete"):
                        raise LoopError(f"long output turn {number}: {event.type}")
                    previous = event.response
                    break
            else:
                raise LoopError("the socket closed before the terminal event")
            usage = previous.usage
            extra = (previous.model_extra or {}).get("turnpike") or {}
            model = extra.get("model_ms") or {}
            tokens = usage.output_tokens if usage else 0
            # ``last`` is set with ``first``: its test only narrows the type.
            window = (
                (last - first)
                if first is not None and last is not None and last > first
                else float("nan")
            )
            decode_ms = float(model.get("decode_ms") or 0.0)
            turns.append(
                {
                    "turn": number,
                    "output_tokens": tokens,
                    "delta_events": deltas,
                    "turn_ms": round((end - start) * 1000, 3),
                    "client_decode_ms": round(window * 1000, 3),
                    "client_tokens_per_s": round(tokens / window, 1) if window == window else None,
                    "worker_decode_ms": round(decode_ms, 3),
                    "worker_tokens_per_s": round(tokens / decode_ms * 1000, 1)
                    if decode_ms
                    else None,
                    "model_ms": model,
                    "stages_ms": extra.get("stages_ms") or {},
                }
            )
            log(
                f"  one connection, turn {number}: {tokens} tokens, client "
                f"{turns[-1]['client_tokens_per_s']} tok/s, worker "
                f"{turns[-1]['worker_tokens_per_s']} tok/s ({deltas} delta events)"
            )
    rates = [t["client_tokens_per_s"] for t in turns if t["client_tokens_per_s"]]
    worker_rates = [t["worker_tokens_per_s"] for t in turns if t["worker_tokens_per_s"]]
    total_tokens = sum(t["output_tokens"] for t in turns)
    total_window = sum(t["client_decode_ms"] for t in turns) / 1000
    return {
        "model": params.stream_model,
        "turns": turns,
        "client_tokens_per_s_median": round(statistics.median(rates), 1) if rates else None,
        "worker_tokens_per_s_median": round(statistics.median(worker_rates), 1)
        if worker_rates
        else None,
        "client_tokens_per_s_overall": round(total_tokens / total_window, 1)
        if total_window
        else None,
    }


def _overheads(loops: list[Loop]) -> list[float]:
    return [t.overhead_ms for loop in loops for t in loop.turns]


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "p90": round(percentile(values, 90), 3),
        "n": len(values),
    }


async def _single(client, params: LoadParams, corpus: dict[str, str], tool_ms: float) -> list[Loop]:
    """The reference: the same short rollout run alone, a few times."""
    single: list[Loop] = []
    for rep in range(params.single_reps):
        rollout = Rollout(f"run_{uuid.uuid4().hex[:12]}", corpus, turns=params.loop_turns)
        single.append(await _ws_loop(client, rollout, params, tool_ms, rep))
    return single


async def _at_once(
    client, params: LoadParams, corpus: dict[str, str], count: int, tool_ms: float, meter=None
) -> tuple[list[Loop], list[str], float, dict[str, float]]:
    """``count`` loops started over ``stagger_s``: the loops that finished, the failures,
    the wall time and CPU milliseconds per process (``client`` is this one)."""

    async def staggered(index: int) -> Loop:
        await asyncio.sleep(params.stagger_s * index / max(1, count))
        rollout = Rollout(f"run_{uuid.uuid4().hex[:12]}", corpus, turns=params.loop_turns)
        return await _ws_loop(client, rollout, params, tool_ms, index)

    if meter is not None:
        meter.start()
    cpu_start = time.process_time()
    start = time.perf_counter()
    outcomes = await asyncio.gather(*(staggered(i) for i in range(count)), return_exceptions=True)
    wall_s = time.perf_counter() - start
    loaded = [x for x in outcomes if isinstance(x, Loop)]
    errors = [f"{type(x).__name__}: {x}"[:300] for x in outcomes if not isinstance(x, Loop)]
    if errors:
        log(f"  {len(errors)} of {count} concurrent loops failed, e.g. {errors[0]}")
    if not loaded:
        raise LoopError(f"every concurrent loop failed, e.g. {errors[0]}")
    cpu_ms = dict(meter.stop()) if meter is not None else {}
    cpu_ms["client"] = (time.process_time() - cpu_start) * 1000
    return loaded, errors, wall_s, cpu_ms


async def many_loops(
    client, params: LoadParams, corpus: dict[str, str], meter=None
) -> dict[str, Any]:
    """(b): one loop alone (a few times), then ``loops`` at once, per tool time; at the
    first tool time also (c), the sweep: how many loops at once stay within 2x."""
    results: dict[str, Any] = {"model": params.loop_model, "loops": params.loops, "cells": []}
    for tool_ms in params.loop_tool_ms:
        single = await _single(client, params, corpus, tool_ms)
        loaded, errors, wall_s, cpu_ms = await _at_once(
            client, params, corpus, params.loops, tool_ms, meter
        )
        output_tokens = sum(t.output_tokens for loop in loaded for t in loop.turns)
        input_tokens = sum(t.input_tokens for loop in loaded for t in loop.turns)
        alone, under_load = _summary(_overheads(single)), _summary(_overheads(loaded))
        cell: dict[str, Any] = {
            "tool_ms": tool_ms,
            "single": {
                "overhead_ms": alone,
                "loop_ms_median": round(statistics.median(x.loop_ms for x in single), 3),
                "raw": [x.record() for x in single],
            },
            "concurrent": {
                "overhead_ms": under_load,
                "loop_ms_median": round(statistics.median(x.loop_ms for x in loaded), 3),
                "loop_ms_p90": round(percentile([x.loop_ms for x in loaded], 90), 3),
                "wall_s": round(wall_s, 3),
                "output_tokens_per_s": round(output_tokens / wall_s, 1),
                "input_tokens_per_s": round(input_tokens / wall_s, 1),
                "turns_per_s": round(sum(len(x.turns) for x in loaded) / wall_s, 2),
                "cpu_ms": {k: round(v, 1) for k, v in cpu_ms.items()},
                "failed_loops": len(errors),
                "errors": errors[:5],
                "raw": [x.record() for x in loaded],
            },
            "overhead_ratio": round(under_load["median"] / alone["median"], 3),
            "cpu_budget": _cpu_budget(cpu_ms, loaded, single, params.loops),
        }
        results["cells"].append(cell)
        log(
            f"  {params.loops} loops at once, tool {tool_ms:g} ms: overhead per turn "
            f"{under_load['median']:.1f} ms (p90 {under_load['p90']:.1f}) vs "
            f"{alone['median']:.1f} ms alone ({cell['overhead_ratio']:.2f}x); "
            f"{cell['concurrent']['output_tokens_per_s']:.0f} output tok/s in {wall_s:.1f} s"
        )
        if tool_ms == params.loop_tool_ms[0] and params.sweep:
            results["sweep"] = await capacity_sweep(client, params, corpus, single, cell, meter)
    return results


async def capacity_sweep(
    client, params: LoadParams, corpus: dict[str, str], single: list[Loop], top: dict, meter=None
) -> dict[str, Any]:
    """(c): the per-turn overhead ratio at several loop counts, to find how many agent
    loops this machine carries within 2x of one loop alone, and where the CPU runs out."""
    alone = statistics.median(_overheads(single))
    tool_ms = top["tool_ms"]
    points = []
    for count in sorted(set(params.sweep) - {params.loops}):
        loaded, errors, wall_s, cpu_ms = await _at_once(
            client, params, corpus, count, tool_ms, meter
        )
        under_load = _summary(_overheads(loaded))
        budget = _cpu_budget(cpu_ms, loaded, single, count)
        points.append(_sweep_point(count, under_load, alone, wall_s, loaded, errors, budget))
        log(
            f"  sweep: {count} loops at once, overhead per turn {under_load['median']:.1f} ms "
            f"({points[-1]['overhead_ratio']:.2f}x alone)"
        )
    top_loaded = top["concurrent"]
    points.append(
        {
            "loops": params.loops,
            "overhead_ms": top_loaded["overhead_ms"],
            "overhead_ratio": top["overhead_ratio"],
            "turns_per_s": top_loaded["turns_per_s"],
            "failed_loops": top_loaded["failed_loops"],
            "cpu_budget": top["cpu_budget"],
        }
    )
    points.sort(key=lambda p: p["loops"])
    within = [p["loops"] for p in points if p["overhead_ratio"] <= 2 and not p["failed_loops"]]
    return {
        "tool_ms": tool_ms,
        "alone_overhead_ms": round(alone, 3),
        "points": points,
        "max_loops_within_2x": max(within) if within else None,
    }


def _sweep_point(count, under_load, alone, wall_s, loaded, errors, budget) -> dict[str, Any]:
    return {
        "loops": count,
        "overhead_ms": under_load,
        "overhead_ratio": round(under_load["median"] / alone, 3),
        "turns_per_s": round(sum(len(x.turns) for x in loaded) / wall_s, 2),
        "failed_loops": len(errors),
        "cpu_budget": budget,
    }


def _cpu_budget(
    cpu_ms: dict[str, float], loaded: list[Loop], single: list[Loop], loops: int
) -> dict[str, Any]:
    """Whether the machine can carry the load at all: CPU per turn (the stack's processes,
    when known, and this client), what the stack alone could serve on every core, and
    what the loops ask for when each runs at its single-loop pace."""
    turns = sum(len(x.turns) for x in loaded)
    stack_ms = sum(v for k, v in cpu_ms.items() if k != "client")
    cores = os.cpu_count() or 1
    single_turns = sum(len(x.turns) for x in single)
    single_ms = sum(x.loop_ms for x in single)
    budget: dict[str, Any] = {
        "client_cpu_ms_per_turn": round(cpu_ms.get("client", 0.0) / turns, 2),
        "demand_turns_per_s": round(loops * single_turns / single_ms * 1000, 1),
        "cores": cores,
    }
    # What the SDK clients alone would need at that pace: above ``cores``, no stack can
    # hold the loops at their single-loop pace on this machine.
    budget["client_cores_at_demand"] = round(
        budget["demand_turns_per_s"] * budget["client_cpu_ms_per_turn"] / 1000, 2
    )
    if stack_ms:
        per_turn = stack_ms / turns
        budget["stack_cpu_ms_per_turn"] = round(per_turn, 2)
        budget["stack_capacity_turns_per_s"] = round(cores * 1000 / per_turn, 1)
        # The benchmark's own clients share the machine: the limit the loops actually meet.
        with_client = per_turn + budget["client_cpu_ms_per_turn"]
        budget["machine_capacity_turns_per_s"] = round(cores * 1000 / with_client, 1)
        budget["cpu_ms_per_turn"] = {k: round(v / turns, 2) for k, v in sorted(cpu_ms.items())}
    return budget


async def _ws_loop(client, rollout: Rollout, params: LoadParams, tool_ms: float, rep: int):
    session = WsSession(client, rollout, params.loop_model, "connection")
    return await run_loop(
        session,
        rollout,
        variant=CONNECTION,
        model=params.loop_model,
        tool_s=tool_ms / 1000,
        rep=rep,
    )


async def run_load(
    client, params: LoadParams, corpus: dict[str, str], meter=None
) -> dict[str, Any]:
    log(f"load (a): one connection at {params.stream_model}, {params.stream_turns} long outputs")
    stream = await one_connection_throughput(client, params)
    log(f"load (b): {params.loops} concurrent loops of {params.loop_turns} turns")
    loops = await many_loops(client, params, corpus, meter)
    return {"params": _params(params), "one_connection": stream, "concurrent_loops": loops}


def _params(params: LoadParams) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(params).items()}
