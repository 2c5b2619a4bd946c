"""``python -m bench.loop`` (``make bench``): a scripted agent loop against the running stack,
every variant side by side, then load; results in ``bench/results/`` (``loop.json``,
``loop.md``, PNG plots).

Expects a stack started by ``make run`` (gateway at http://127.0.0.1:8080); ``--start-stack``
starts one on free ports instead. ``--quick`` is a smoke run (under a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shlex
import sys
import time
import uuid
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import grpc
from openai import AsyncOpenAI

from bench.loop import analysis, report
from bench.loop.concurrency import LoadParams, run_load
from bench.loop.direct import build_plan, route
from bench.loop.rollout import TOOLS, Rollout, repo_corpus
from bench.loop.stack import (
    DEFAULT_ROUTER,
    CpuMeter,
    StackMissing,
    Target,
    run_parser,
    target_from,
)
from bench.loop.variants import (
    CONNECTION,
    DIRECT,
    INJECT,
    PIPELINE_HEADER,
    PIPELINE_OF,
    STATELESS,
    VARIANTS,
    DirectSession,
    HttpSession,
    InjectSession,
    Loop,
    Session,
    WsSession,
    run_loop,
)
from bench.services.common import log, machine_info
from turnpike import token_bytes
from turnpike.router.registry import ModelRegistry, load_models

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results"
MAX_CONSECUTIVE_FAILURES = 5


@dataclass(frozen=True)
class Plan:
    speeds: tuple[float, ...]
    tool_ms: tuple[float, ...]
    turns: int
    reps: int
    reps_slow: int  # at speeds below 100 tok/s, where a loop takes many seconds
    variants: tuple[str, ...]
    load: LoadParams | None

    def reps_at(self, speed: float) -> int:
        return self.reps_slow if speed < 100 else self.reps


FULL = Plan(
    speeds=(65.0, 1000.0, 4000.0),
    tool_ms=(0.0, 30.0),
    turns=25,
    reps=5,
    reps_slow=3,
    variants=VARIANTS,
    load=LoadParams(),
)
QUICK = Plan(
    speeds=(4000.0,),
    tool_ms=(0.0, 30.0),
    turns=4,
    reps=1,
    reps_slow=1,
    variants=VARIANTS,
    load=LoadParams(
        stream_turns=2,
        stream_tokens=2000,
        loops=5,
        loop_turns=4,
        loop_tool_ms=(0.0,),
        single_reps=1,
        stagger_s=0.1,
        sweep=(2,),
    ),
)


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = run_parser(
        "python -m bench.loop",
        "Agent-loop benchmark over the OpenAI SDK: legacy, sprint, connection, stateless "
        "and the worker directly.",
        DEFAULT_OUT,
        quick="4,000 tok/s, 4 turns",
    )
    parser.add_argument(
        "--router", default=DEFAULT_ROUTER, help="router gRPC address (the direct variant)"
    )
    parser.add_argument("--speeds", type=_floats, help="model speeds, tok/s (65,1000,4000)")
    parser.add_argument("--tool-ms", type=_floats, help="client tool times, ms (0,30)")
    parser.add_argument("--turns", type=int, help="requests per loop (25)")
    parser.add_argument("--reps", type=int, help="repetitions per cell (5)")
    parser.add_argument("--reps-slow", type=int, help="repetitions at 65 tok/s (3)")
    parser.add_argument("--variants", help=f"comma-separated subset of {','.join(VARIANTS)}")
    parser.add_argument("--loops", type=int, help="concurrent loops in the load phase (50)")
    parser.add_argument("--no-load", action="store_true", help="skip the load phase")
    return parser.parse_args(argv)


def plan_from(args: argparse.Namespace) -> Plan:
    plan = QUICK if args.quick else FULL
    changes: dict[str, Any] = {}
    for name in ("speeds", "tool_ms", "turns", "reps", "reps_slow"):
        if getattr(args, name) is not None:
            changes[name] = getattr(args, name)
    if args.variants:
        chosen = tuple(v.strip() for v in args.variants.split(",") if v.strip())
        if unknown := [v for v in chosen if v not in VARIANTS]:
            raise SystemExit(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
        changes["variants"] = chosen
    if args.no_load:
        changes["load"] = None
    elif args.loops is not None and plan.load is not None:
        changes["load"] = replace(plan.load, loops=args.loops)
    return replace(plan, **changes)


def models_by_speed(speeds: tuple[float, ...]) -> dict[float, str]:
    """The simulator model of each speed, from the model registry."""
    entries = [e for e in ModelRegistry(load_models()).models() if e.backend == "simulator"]
    chosen: dict[float, str] = {}
    for speed in speeds:
        match = [e.id for e in entries if e.tokens_per_second == speed]
        if not match:
            have = ", ".join(f"{e.id} ({e.tokens_per_second:g})" for e in entries)
            raise SystemExit(f"no simulator model runs at {speed:g} tok/s; the registry has {have}")
        chosen[speed] = match[0]
    return chosen


class Runner:
    def __init__(self, target: Target, plan: Plan, corpus: dict[str, str]) -> None:
        self.target = target
        self.plan = plan
        self.corpus = corpus
        self.client = AsyncOpenAI(
            base_url=target.base_url, api_key=target.api_key, max_retries=0, timeout=300
        )
        self.meter = CpuMeter(target.pids)
        self.failures: list[dict[str, Any]] = []
        self.consecutive_failures = 0

    def rollout(self, turns: int | None = None) -> Rollout:
        return Rollout(f"run_{uuid.uuid4().hex[:12]}", self.corpus, turns=turns or self.plan.turns)

    async def session(self, variant: str, rollout: Rollout, model: str) -> Session:
        if variant == DIRECT:
            plan = build_plan(rollout, model)  # before the clock starts
            first = plan.requests[0]
            address = await route(
                self.target.router, model, rollout.run_id, token_bytes.count(first.prompt)
            )
            return DirectSession(address, plan)
        if variant == CONNECTION:
            return WsSession(self.client, rollout, model, PIPELINE_OF[variant])
        if variant == INJECT:
            return InjectSession(self.client, rollout, model, PIPELINE_OF[variant])
        return HttpSession(
            self.client, rollout, model, PIPELINE_OF[variant], stateless=variant == STATELESS
        )

    async def one(self, variant: str, model: str, tool_ms: float, rep: int, turns=None) -> Loop:
        rollout = self.rollout(turns)
        session = await self.session(variant, rollout, model)
        self.meter.start()
        loop = await run_loop(
            session, rollout, variant=variant, model=model, tool_s=tool_ms / 1000, rep=rep
        )
        loop.service_cpu_ms = self.meter.stop()
        return loop

    def failed(self, variant: str, model: str, tool_ms: float, rep: int, exc: Exception) -> None:
        error = f"{type(exc).__name__}: {exc}"[:500]
        log(f"FAILED {variant} on {model}, tool {tool_ms:g} ms, rep {rep + 1}: {error}")
        self.failures.append(
            {"variant": variant, "model": model, "tool_ms": tool_ms, "rep": rep, "error": error}
        )
        self.consecutive_failures += 1
        if self.consecutive_failures >= MAX_CONSECUTIVE_FAILURES:
            raise RuntimeError(f"{self.consecutive_failures} loops in a row failed; stopping")

    async def preflight(self, model: str) -> None:
        """The stack honours the pipeline header (devstack allows it), and answers."""
        reply = await self.client.responses.create(
            model=model, input="ping", extra_headers={PIPELINE_HEADER: "legacy"}
        )
        seen = ((reply.model_extra or {}).get("turnpike") or {}).get("pipeline")
        if seen != "legacy":
            raise StackMissing(
                f"The gateway ignored {PIPELINE_HEADER} (answered on pipeline {seen!r}): start "
                "it with TURNPIKE_ALLOW_PIPELINE_OVERRIDE=true, as `make run` does."
            )
        if DIRECT in self.plan.variants:
            try:
                await route(self.target.router, model, "preflight", 1)
            except grpc.aio.AioRpcError as err:
                raise StackMissing(
                    f"The router at {self.target.router} does not answer ({err.code().name}); "
                    "the direct-worker variant asks it for a worker. Pass --router, or leave "
                    "the variant out with --variants."
                ) from None

    async def run(self, models: dict[float, str]) -> tuple[list[dict[str, Any]], dict | None]:
        try:
            return await self._run(models)
        finally:
            await self.client.close()

    async def _run(self, models: dict[float, str]) -> tuple[list[dict[str, Any]], dict | None]:
        plan = self.plan
        warm_model = models[max(models)]
        await self.preflight(warm_model)
        log(f"warm-up: one short loop per variant on {warm_model} (not counted)")
        for variant in plan.variants:
            await self.one(variant, warm_model, 0.0, -1, turns=min(3, plan.turns))
        loops: list[dict[str, Any]] = []
        for speed in plan.speeds:
            model = models[speed]
            reps = plan.reps_at(speed)
            for tool_ms in plan.tool_ms:
                for rep in range(reps):
                    # Round-robin over the variants, starting one further each repetition,
                    # so drift on the machine hits every variant alike.
                    shift = rep % len(plan.variants)
                    order = plan.variants[shift:] + plan.variants[:shift]
                    for variant in order:
                        try:
                            loop = await self.one(variant, model, tool_ms, rep)
                        except Exception as exc:  # one failed loop must not end the run
                            self.failed(variant, model, tool_ms, rep, exc)
                            continue
                        self.consecutive_failures = 0
                        loops.append(loop.record())
                        t = loop.turns
                        follow = sum(x.ttft_ms for x in t[1:]) / max(1, len(t) - 1)
                        log(
                            f"{speed:>5,.0f} tok/s tool {tool_ms:>2g} ms rep {rep + 1}/{reps} "
                            f"{variant:<15} {loop.loop_ms / 1000:6.2f} s  (follow-up TTFT "
                            f"{follow:5.1f} ms, overhead 2nd/last turn {t[1].overhead_ms:5.1f}"
                            f"/{t[-1].overhead_ms:5.1f} ms)"
                        )
        load = None
        if plan.load is not None:
            load = await run_load(self.client, plan.load, self.corpus, self.meter)
        return loops, load


def command_line(argv: list[str]) -> str:
    return "make bench" + (f" BENCH_ARGS={shlex.quote(shlex.join(argv))}" if argv else "")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    plan = plan_from(args)
    models = models_by_speed(plan.speeds + ((1000.0, 4000.0) if plan.load else ()))
    began = time.monotonic()
    loadavg_start = [round(x, 2) for x in os.getloadavg()]
    try:
        target = target_from(args, args.router, "make bench")
    except StackMissing as exc:
        print(exc, file=sys.stderr)
        return 2
    log(f"{target.description}: {target.base_url} (load average {loadavg_start})")
    corpus = repo_corpus()
    try:
        if plan.load is not None:
            plan = replace(
                plan,
                load=replace(plan.load, stream_model=models[4000.0], loop_model=models[1000.0]),
            )
        runner = Runner(target, plan, corpus)
        loops, load = asyncio.run(runner.run(models))
    except StackMissing as exc:
        print(exc, file=sys.stderr)
        return 2
    finally:
        target.stop()

    speeds = {models[s]: s for s in plan.speeds}
    cells = analysis.summarize(loops, speeds)
    machine = machine_info() | {
        "loadavg_start": loadavg_start,
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
    }
    sample = Rollout("run_sample", corpus, turns=plan.turns)
    data: dict[str, Any] = {
        "title": "Agent loop benchmark",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "mode": "quick" if args.quick else "full",
        "command": command_line(argv),
        "duration_s": round(time.monotonic() - began, 1),
        "machine": machine,
        "stack": target.description,
        "params": {
            "speeds": list(plan.speeds),
            "models": {f"{s:g}": models[s] for s in plan.speeds},
            "tool_ms": list(plan.tool_ms),
            "turns": plan.turns,
            "tool_calls": plan.turns - 1,
            "reps": {f"{s:g}": plan.reps_at(s) for s in plan.speeds},
            "reps_text": _reps_text(plan),
            "variants": list(plan.variants),
            "instructions_chars": len(sample.instructions),
            "tools": len(TOOLS),
            "output_chars": sample.output_chars,
            "history_tokens_last": max((c["input_tokens_last"] for c in cells), default=0),
        },
        "targets": analysis.targets(cells, load, plan.tool_ms),
        "cells": cells,
        "load": load,
        "loops": loops,
        "failures": runner.failures,
        "plots": [],
    }
    written = report.write(data, args.out.resolve())
    for t in data["targets"]:
        verdict = {True: "pass", False: "MISS", None: "n/a "}[t["pass"]]
        log(f"[{verdict}] {t['name']}: {t['detail']}")
    log(f"done in {time.monotonic() - began:.0f} s -> " + ", ".join(p.name for p in written))
    log(f"results in {args.out.resolve()}")
    return 0


def _reps_text(plan: Plan) -> str:
    if plan.reps == plan.reps_slow or not any(s < 100 for s in plan.speeds):
        return f"{plan.reps} repetition{'s' if plan.reps != 1 else ''}"
    return f"{plan.reps} repetitions ({plan.reps_slow} at 65 tok/s, where a loop takes long)"


if __name__ == "__main__":
    sys.exit(main())
