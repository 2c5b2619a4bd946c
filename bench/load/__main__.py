"""``python -m bench.load`` (``make bench-load``): N agent loops at once over raw WebSocket
and raw HTTP/SSE, swept over N; per N the turns per second, per-turn latency and API
overhead (p50/p90/p99), errors, and CPU per turn of every service and of this client,
in milliseconds and in the machine's unit (``bench.load.machine_unit``, measured at the
start and the end of the run). Results in ``bench/results/`` (``load.json``, ``load.md``,
``load.png``).

Expects a stack started by ``make run`` (gateway at http://127.0.0.1:8080/v1);
``--start-stack`` starts one on free ports instead. ``--variant`` (repeatable) starts a
stack per variant (``bench.load.variants``: a git revision, tracing on) and alternates
their cells, ``--repeats`` times each, so a before and an after meet the same machine.
``--quick`` is a smoke run (well under a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib.metadata
import math
import os
import shlex
import statistics
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.load import machine_unit, report
from bench.load.collector import Collector
from bench.load.driver import CellPlan, idle_cpu, run_cell
from bench.load.profiles import Profiles
from bench.load.stats import COLLECTOR, add_hops, add_ratios, comparisons, summarize, targets
from bench.load.transports import HTTP, TRANSPORTS, WEBSOCKET
from bench.load.variants import Variant, parse_variant, stack_env
from bench.loop.rollout import TOOLS, Rollout, repo_corpus
from bench.loop.stack import (
    DEFAULT_ROUTER,
    CpuMeter,
    StackMissing,
    Target,
    run_parser,
    start_local,
    target_from,
)
from bench.services.common import log, machine_info

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results"
ALIASES = {"ws": WEBSOCKET, "websocket": WEBSOCKET, "http": HTTP, "sse": HTTP}
IDLE_S = 3.0
WARMUP_TRIES = 3


@dataclass(frozen=True)
class Plan:
    loops: tuple[int, ...] = (1, 10, 25, 50, 100)
    transports: tuple[str, ...] = TRANSPORTS
    turns: int = 25  # per rollout, as the loop benchmark's
    min_turns: int = 200  # per cell: loops replay rollouts until the cell has this many
    model: str = "turnpike-sim"
    stagger_s: float = 0.5
    turn_timeout_s: float = 120.0
    warmup_turns: int = 3

    def rollouts_per_loop(self, loops: int) -> int:
        return max(1, math.ceil(self.min_turns / (loops * self.turns)))

    def cell(self, turns: int | None = None) -> CellPlan:
        return CellPlan(self.model, turns or self.turns, self.stagger_s, self.turn_timeout_s)


FULL = Plan()
QUICK = Plan(loops=(1, 4), turns=4, min_turns=8, stagger_s=0.1)


def positive_ints(text: str) -> tuple[int, ...]:
    values = tuple(int(x) for x in text.split(",") if x.strip())
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("a comma-separated list of positive integers")
    return values


def _transports(text: str) -> tuple[str, ...]:
    names = [x.strip().lower() for x in text.split(",") if x.strip()]
    if unknown := [n for n in names if n not in ALIASES]:
        raise argparse.ArgumentTypeError(f"unknown transport(s) {unknown}: websocket, http")
    return tuple(dict.fromkeys(ALIASES[n] for n in names))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = run_parser(
        "python -m bench.load",
        "N agent loops at once over raw WebSocket and HTTP/SSE: throughput, latency, API "
        "overhead, errors and CPU per turn of every service.",
        DEFAULT_OUT,
        quick="1 and 4 loops, 4 turns",
    )
    parser.add_argument("--loops", type=positive_ints, help="loops at once, swept (1,10,25,50,100)")
    parser.add_argument("--transports", type=_transports, help="websocket,http (both)")
    parser.add_argument("--turns", type=int, help="turns per rollout (25; at least 2)")
    parser.add_argument("--min-turns", type=int, help="turns per cell, at least (200)")
    parser.add_argument("--model", help="model id (turnpike-sim: 1,000 tokens/s)")
    parser.add_argument("--note", help="a line on the machine and its load, for load.md")
    parser.add_argument(
        "--variant",
        type=parse_variant,
        action="append",
        default=[],
        metavar="NAME[=PART+...]",
        help="a stack to compare, started here (repeatable; the first is the reference): "
        "NAME alone is this checkout; parts rev:REV (a git revision's code), tracing (every "
        "span to an OTLP collector on loopback), env:NAME=VALUE",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="each cell run this many times per variant, variants alternated (1)",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="flame graphs (py-spy) of every process during one cell, into DIR/<process>.svg",
    )
    parser.add_argument(
        "--profile-at",
        type=int,
        default=10,
        metavar="N",
        help="the cell profiled: N loops at once over WebSocket (10; must be swept)",
    )
    return parser.parse_args(argv)


def plan_from(args: argparse.Namespace) -> Plan:
    given = ("loops", "transports", "turns", "min_turns", "model")
    plan = replace(
        QUICK if args.quick else FULL,
        **{name: value for name in given if (value := getattr(args, name)) is not None},
    )
    if plan.turns < 2:
        raise SystemExit("--turns: a rollout needs at least 2 turns")
    if args.repeats < 1:
        raise SystemExit("--repeats: at least 1")
    return plan


@dataclass
class Stack:
    """A stack under test and the variant it is (the running one is the only variant
    when none is named)."""

    name: str
    target: Target
    variant: Variant | None = None
    collector: Collector | None = None
    spans: dict[str, Any] | None = None  # what its collector counted, at the end

    def stop(self) -> None:
        self.target.stop()
        if self.collector is not None:
            self.spans = self.collector.stop()
            self.collector = None


def start_stacks(args: argparse.Namespace) -> list[Stack]:
    """One stack per ``--variant``, all started before any is measured; or the stack
    the arguments name (``--start-stack``, or the running one)."""
    if not args.variant:
        target = target_from(args, DEFAULT_ROUTER, "make bench-load")
        return [Stack("started" if args.start_stack else "running", target)]
    names = [v.name for v in args.variant]
    if len(set(names)) != len(names):
        raise SystemExit(f"--variant: each name once ({names})")
    stacks: list[Stack] = []
    try:
        for variant in args.variant:
            collector = Collector() if variant.tracing else None
            port = collector.port if collector is not None else None
            env = dict(args.stack_env) | stack_env(variant, port)
            log(f"starting variant {variant.name}: {variant.describe()}")
            stack = Stack(variant.name, start_local(env), variant, collector)
            if collector is not None:
                stack.target.pids[COLLECTOR] = collector.pid
            stacks.append(stack)
    except BaseException:
        for stack in stacks:
            stack.stop()
        raise
    return stacks


async def warm_up(target: Target, plan: Plan, corpus: dict[str, str]) -> dict[str, int]:
    """One short loop per transport, not counted, tried up to ``WARMUP_TRIES`` times (a
    stack just started may still be connecting its backends); a stack that fails every
    try is not measured. Returns the errors of the failed tries, to report them."""
    meter = CpuMeter({})
    seen: Counter[str] = Counter()
    for transport in plan.transports:
        for attempt in range(1, WARMUP_TRIES + 1):
            cell = await run_cell(
                target, meter, transport, 1, 1, plan.cell(plan.warmup_turns), corpus
            )
            if not cell["error_count"]:
                break
            seen.update(cell["errors"])
            log(f"  warm-up over {transport}, try {attempt}: {cell['error_messages']}")
            if attempt == WARMUP_TRIES:
                raise StackMissing(
                    f"The warm-up over {transport} failed {WARMUP_TRIES} times: "
                    f"{cell['errors']} (model {plan.model!r}): {cell['error_messages']}"
                )
            await asyncio.sleep(1.0)
    return dict(seen)


def _order(stacks: list[Stack], repeat: int) -> list[Stack]:
    """Variants alternate: forward on even repeats, backward on odd ones (ABBA), so that
    neither always runs first after a cell of the other."""
    return stacks if repeat % 2 == 0 else stacks[::-1]


async def sweep(
    stacks: list[Stack],
    plan: Plan,
    corpus: dict[str, str],
    repeats: int = 1,
    profiles: dict[str, Profiles] | None = None,
) -> dict[str, Any]:
    log(f"warm-up: one {plan.warmup_turns}-turn loop per transport (not counted)")
    warmup_errors: dict[str, dict[str, int]] = {}
    idle: dict[str, dict[str, float]] = {}
    for stack in stacks:
        if errors := await warm_up(stack.target, plan, corpus):
            warmup_errors[stack.name] = errors
    for stack in stacks:
        idle[stack.name] = await idle_cpu(CpuMeter(stack.target.pids), IDLE_S)
        log(f"idle CPU of {stack.name}, ms per second: {idle[stack.name]}")
    named = len(stacks) > 1
    cells: list[dict[str, Any]] = []
    # Transports and variants alternate at each N, so drift on the machine hits all alike.
    for loops in plan.loops:
        for transport in plan.transports:
            for repeat in range(repeats):
                for stack in _order(stacks, repeat):
                    cells.append(
                        await _cell(stack, plan, corpus, loops, transport, repeat, named, profiles)
                    )
    for cell in cells:
        # What the processes would have spent idle over the cell's wall time, per turn.
        idle_ms = sum(idle[cell["variant"]].values()) * cell["wall_s"]
        cell["idle_cpu_ms_per_turn"] = round(idle_ms / max(1, cell["turns_ok"]), 3)
    add_ratios(cells)
    return {
        "warmup_errors": warmup_errors if named else warmup_errors.get(stacks[0].name, {}),
        "idle_cpu_ms_per_s": idle if named else idle[stacks[0].name],
        "cells": cells,
    }


async def _cell(
    stack: Stack,
    plan: Plan,
    corpus: dict[str, str],
    loops: int,
    transport: str,
    repeat: int,
    named: bool,
    profiles: dict[str, Profiles] | None,
) -> dict[str, Any]:
    reps = plan.rollouts_per_loop(loops)
    who = f"[{stack.name}, repeat {repeat + 1}] " if named else ""
    log(
        f"{who}{transport}, {loops} loop(s) at once, {reps} rollout(s) of {plan.turns} "
        f"turns each ({loops * reps * plan.turns} turns)"
    )
    profiler = profiles.get(stack.name) if profiles else None
    profiled = profiler is not None and repeat == 0 and (loops, transport) == profiler.cell
    if profiled:
        assert profiler is not None  # ``profiled`` says so
        profiler.start()
    cell = await run_cell(
        stack.target, CpuMeter(stack.target.pids), transport, loops, reps, plan.cell(), corpus
    )
    if profiled:
        assert profiler is not None
        written = profiler.stop()
        log(f"  profiled: {', '.join(p.name for p in written)} in {profiler.out}")
    cell = {"variant": stack.name, "repeat": repeat + 1, **cell, "profiled": profiled}
    o, per = cell["overhead_ms"], cell["cpu_ms_per_turn"]
    log(
        f"  {cell['turns_per_s']} turns/s; overhead p50/p90/p99 {o['p50']}/{o['p90']}/"
        f"{o['p99']} ms; {cell['error_count']} errors ({cell['dropped']} dropped); "
        f"CPU/turn stack {per.get('stack', '-')} ms, client "
        f"{cell['client_cpu_ms_per_turn']} ms"
    )
    if cell["errors"]:
        log(f"  errors: {cell['errors']}")
    return cell


def measure_unit(quick: bool) -> dict[str, Any]:
    """The machine's unit, measured now (the run measures it at its start and its end)."""
    calls, repeats = (1000, 1) if quick else (machine_unit.CALLS, machine_unit.REPEATS)
    unit = machine_unit.measure(calls, repeats)
    log(
        f"machine unit: an empty unary gRPC round trip costs {unit.hop_cpu_ms:.4f} ms of CPU "
        f"({unit.hop.wall_ms:.4f} ms wall); a message each way on an open stream "
        f"{unit.stream_message.cpu_ms:.4f} ms"
    )
    return unit.as_dict()


def command_line(argv: list[str], make_target: str = "bench-load") -> str:
    """How to run it again, as ``make <make_target>`` (the note left out: it describes
    this run's machine)."""
    kept = [a for i, a in enumerate(argv) if a != "--note" and (i == 0 or argv[i - 1] != "--note")]
    kept = [a for a in kept if not a.startswith("--note=")]
    return f"make {make_target}" + (f" BENCH_ARGS={shlex.quote(shlex.join(kept))}" if kept else "")


def _version(package: str) -> str:
    return f"{package} {importlib.metadata.version(package)}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    plan = plan_from(args)
    if args.profile is not None and (
        args.profile_at not in plan.loops or WEBSOCKET not in plan.transports
    ):
        print("--profile-at: that many loops over WebSocket is not swept", file=sys.stderr)
        return 2
    began = time.monotonic()
    loadavg_start = [round(x, 2) for x in os.getloadavg()]
    units = [measure_unit(args.quick)]
    try:
        stacks = start_stacks(args)
    except StackMissing as exc:
        print(exc, file=sys.stderr)
        return 2
    for stack in stacks:
        target = stack.target
        log(f"{stack.name}: {target.description}: {target.base_url} (load average {loadavg_start})")
        if missing := {"gateway", "worker-1"} - set(target.pids):
            log(f"no process found for {sorted(missing)}: their CPU is not counted")
    corpus = repo_corpus()
    profiles = None
    if args.profile is not None:
        out = args.profile.resolve()
        profiles = {
            stack.name: Profiles(
                stack.target.pids,
                out / stack.name if len(stacks) > 1 else out,
                (args.profile_at, WEBSOCKET),
            )
            for stack in stacks
        }
    try:
        import uvloop

        results = uvloop.run(sweep(stacks, plan, corpus, args.repeats, profiles))
    except StackMissing as exc:
        print(exc, file=sys.stderr)
        return 2
    finally:
        for stack in stacks:
            stack.stop()
    units.append(measure_unit(args.quick))
    hop_cpu_ms = round(statistics.median(u["hop_cpu_ms"] for u in units), 4)
    summary = summarize(results["cells"])
    add_ratios(summary)
    for records in (results["cells"], summary):
        add_hops(records, hop_cpu_ms)

    sample = Rollout("run_sample", corpus, turns=plan.turns)
    data: dict[str, Any] = {
        "title": "Load: agent loops at once",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "command": command_line(argv),
        "duration_s": round(time.monotonic() - began, 1),
        "machine": machine_info()
        | {"loadavg_start": loadavg_start, "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
        "machine_unit": {"hop_cpu_ms": hop_cpu_ms, "start": units[0], "end": units[1]},
        "stack": "; ".join(f"{s.name}: {s.target.description}" for s in stacks)
        if len(stacks) > 1
        else stacks[0].target.description,
        "variants": [
            {
                "name": s.name,
                "describe": s.variant.describe() if s.variant else s.target.description,
                "spans": s.spans,
            }
            for s in stacks
        ],
        "note": args.note,
        "params": {
            "loops": list(plan.loops),
            "transports": list(plan.transports),
            "model": plan.model,
            "turns": plan.turns,
            "min_turns": plan.min_turns,
            "repeats": args.repeats,
            "stagger_s": plan.stagger_s,
            "turn_timeout_s": plan.turn_timeout_s,
            "instructions_chars": len(sample.instructions),
            "tools": len(TOOLS),
            "output_chars": sample.output_chars,
            "clients": {WEBSOCKET: _version("websockets"), HTTP: _version("httptools")},
        },
        **results,
        "summary": summary,
        "comparisons": comparisons(summary),
        "targets": targets(summary, plan.model),
    }
    written = report.write(data, args.out.resolve())
    for t in data["targets"]:
        log(f"{t['name']}: {t['detail']}")
    for c in data["comparisons"]:
        log(
            f"{c['variant']} vs {c['reference']}, {c['transport']} x{c['loops']}: overhead p50 "
            f"{c['overhead_p50']['ratio']}x, stack CPU/turn {c['stack_cpu_ms']['ratio']}x, "
            f"turns/s {c['turns_per_s']['ratio']}x"
        )
    log(f"done in {time.monotonic() - began:.0f} s -> " + ", ".join(p.name for p in written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
