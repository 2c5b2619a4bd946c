"""``python -m bench.soak`` (``make soak``): a light, steady load of agent loops for a long
time (10 minutes by default), the resident memory of every service sampled every few
seconds. Results in ``bench/results/`` (``soak.json``, ``soak.md``, ``soak.png``): per
service the memory after warm-up and at the end, the slope, and whether it stayed flat.

By default it starts a stack of its own on free ports with small bounds on the stores and
caches (``SMALL_BOUNDS``), so that they fill during warm-up and the rest of the run shows
eviction at work; ``--base-url`` measures a running stack instead (``make run``), whose
default bounds may take hours of this load to reach.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from bench.load.driver import settled_usage
from bench.load.stats import Tally
from bench.load.transports import TRANSPORTS
from bench.loop.rollout import repo_corpus
from bench.loop.stack import DEFAULT_ROUTER, StackMissing, Target, running, start_local
from bench.services.common import log, machine_info
from bench.soak import report
from bench.soak.load import SoakPlan, run_load
from bench.soak.memory import sample, trends

DEFAULT_OUT = report.DEFAULT_OUT
# Small enough that this load fills them in the first minutes, large enough to be real.
SMALL_BOUNDS = {
    "TURNPIKE_STORE_MAX_RESPONSES": "2000",
    "TURNPIKE_TOKEN_CACHE_TOKENS": "1000000",
    "TURNPIKE_WORKER_CACHE_TOKENS": "200000",
    "TURNPIKE_ROUTER_AFFINITY_CAPACITY": "1000",
    "TURNPIKE_SAFETY_STATE_MAX_CONVERSATIONS": "500",
}
PROGRESS_EVERY_S = 30.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description="A steady agent-loop load for a long time; the memory of every service.",
    )
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load (600)")
    parser.add_argument(
        "--warmup",
        type=float,
        help="seconds not judged for flatness (a fifth of the run, or until the store filled)",
    )
    parser.add_argument("--rate", type=float, default=10.0, help="turns per second (10)")
    parser.add_argument("--loops", type=int, default=6, help="agent loops, half per transport")
    parser.add_argument("--turns", type=int, default=10, help="turns per rollout (10)")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder")
    parser.add_argument("--base-url", help="measure the stack running here (e.g. make run's)")
    parser.add_argument(
        "--api-key", default=os.environ.get("TURNPIKE_BENCH_API_KEY", "sk-turnpike-dev")
    )
    parser.add_argument("--note", help="a line on the machine and its load, for soak.md")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.rate <= 0 or args.loops < 1 or args.interval <= 0:
        parser.error("--duration, --rate, --loops and --interval must be positive")
    if args.turns < 2:
        parser.error("--turns: a rollout needs at least 2 turns")
    return args


def command_line(argv: list[str]) -> str:
    """How to run it again (without the note and the results folder: they describe this
    run and this machine)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--note", "--out"):
            skip = True
        elif not arg.startswith(("--note=", "--out=")):
            kept.append(arg)
    return "make soak" + (f" BENCH_ARGS={shlex.quote(shlex.join(kept))}" if kept else "")


def warmup_s(args: argparse.Namespace, bounds: dict[str, str]) -> float:
    """What the run does not judge: a fifth of it, and at least until the response store
    has filled one and a half times over at the paced rate (the largest of the caches)."""
    if args.warmup is not None:
        return args.warmup
    store = int(bounds.get("TURNPIKE_STORE_MAX_RESPONSES", 0))
    return max(args.duration / 5, min(1.5 * store / args.rate, args.duration / 2))


async def sampler(target: Target, began: float, interval: float, rows: list[dict]) -> None:
    while True:
        rows.append({"t": round(time.monotonic() - began, 2), "rss_mib": sample(target.pids)})
        await asyncio.sleep(interval)


async def progress(began: float, plan: SoakPlan, tallies: dict[str, Tally], rows: list) -> None:
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        ok = sum(t.ok for t in tallies.values())
        errors = sum(sum(t.errors.values()) for t in tallies.values())
        total = sum(rows[-1]["rss_mib"].values()) if rows else 0.0
        log(
            f"  {time.monotonic() - began:.0f}/{plan.duration_s:.0f} s: {ok:,} turns, "
            f"{errors} errors, stack RSS {total:,.0f} MiB"
        )


async def soak(target: Target, plan: SoakPlan, interval: float) -> dict[str, Any]:
    corpus = repo_corpus()
    tallies: dict[str, Tally] = {t: Tally() for t in TRANSPORTS}
    rows: list[dict] = []
    began = time.monotonic()
    background = [
        asyncio.create_task(sampler(target, began, interval, rows)),
        asyncio.create_task(progress(began, plan, tallies, rows)),
    ]
    try:
        await run_load(target, plan, corpus, tallies)
    finally:
        for task in background:
            task.cancel()
    wall_s = time.monotonic() - began
    rows.append({"t": round(wall_s, 2), "rss_mib": sample(target.pids)})
    usage = await settled_usage(target)
    per_transport = {
        name: {
            "turns_ok": t.ok,
            "turns_sent": t.sent,
            "errors": dict(t.errors),
            "error_messages": dict(t.messages),
            "dropped": t.dropped,
        }
        for name, t in tallies.items()
    }
    return {"wall_s": round(wall_s, 1), "samples": rows, "transports": per_transport,
            "billing_pending_after": usage.get("pending_events", 0)}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    plan = SoakPlan(args.duration, args.loops, args.rate, args.turns)
    try:
        if args.base_url:
            target = running(args.base_url, args.api_key, DEFAULT_ROUTER, "make soak")
            bounds: dict[str, str] = {}
        else:
            log("starting a stack on free ports, with small bounds on its stores and caches")
            bounds = SMALL_BOUNDS
            target = start_local(extra_env=bounds)
    except StackMissing as exc:
        print(exc, file=sys.stderr)
        return 2
    args.warmup = warmup_s(args, bounds)
    log(f"{target.description}: {target.base_url}; processes: {', '.join(sorted(target.pids))}")
    log(
        f"{plan.loops} loops, {plan.rate_per_s:g} turns/s for {plan.duration_s:.0f} s, memory every "
        f"{args.interval:g} s (warm-up {args.warmup:.0f} s)"
    )
    try:
        import uvloop

        results = uvloop.run(soak(target, plan, args.interval))
    finally:
        target.stop()
    found = trends(results["samples"], args.warmup)
    data = {
        "title": "Soak: memory under a steady load",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": command_line(argv),
        "machine": machine_info(),
        "stack": target.description,
        "note": args.note,
        "params": {
            "duration_s": plan.duration_s,
            "warmup_s": args.warmup,
            "rate_per_s": plan.rate_per_s,
            "loops": plan.loops,
            "turns": plan.turns,
            "model": plan.model,
            "interval_s": args.interval,
            "bounds": bounds,
        },
        **results,
        "trends": [t.__dict__ | {"growth_mib": t.growth_mib} for t in found],
    }
    written = report.write(data, args.out.resolve())
    for t in found:
        log(
            f"{t.service}: {t.start_mib:.0f} -> {t.end_mib:.0f} MiB after warm-up "
            f"({t.slope_mib_per_h:+.1f} MiB/h), {'flat' if t.flat else 'GROWING'}"
        )
    log("results: " + ", ".join(p.name for p in written))
    failed = sum(sum(t["errors"].values()) for t in results["transports"].values())
    return 0 if all(t.flat for t in found) and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
