"""``python -m bench.realmodel`` (``make bench-real-model``): the agent-loop benchmark on a
real model, on CPU: llama.cpp's server with Gemma 3 270M (the image ``make
image-llamacpp`` builds) behind the OpenAI-compatible backend.

The same scripted loop as ``make bench`` (bench/loop), driven the same ways (legacy,
sprint, connection, inject), alternated rep by rep, with two differences the model makes:

- it is a base model whose template makes no tool calls, so every request says
  ``tool_choice: "required"``, the worker asks for the call as JSON
  (``TURNPIKE_OPENAI_COMPAT_CALLS_AS_JSON``) and the server's grammar makes one; every
  turn is a call, and the loop ends at the last one (``Rollout.calls_only``);
- prefill runs at a few hundred tokens a second, so tool outputs are short and loops few.

A fifth variant, ``connection-ws`` against a second server started with its prompt cache
off, shows what the server's prefix cache buys: the same turns, each prefilled whole.
Results: ``real-model.json``, ``real-model.md`` and ``real-model.png`` in ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

from bench.loop.rollout import Rollout, repo_corpus
from bench.loop.stack import CpuMeter
from bench.loop.variants import (
    CONNECTION,
    INJECT,
    LEGACY,
    PIPELINE_OF,
    SPRINT,
    HttpSession,
    InjectSession,
    LoopError,
    Session,
    WsSession,
    run_loop,
)
from bench.realmodel import report
from bench.realmodel.report import COLD
from bench.services.common import log, machine_info
from turnpike.devstack import LocalStack, StackConfig, pick_free_ports
from turnpike.devstack.llamacpp import LlamaServer, LlamaServerError

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results"
MODEL = "self-hosted"  # the router's entry for the OpenAI-compatible backend
VARIANTS = (LEGACY, SPRINT, CONNECTION, INJECT, COLD)
# The second server: llama.cpp's prompt cache off, so every turn is prefilled whole.
NO_PREFIX_CACHE = {"LLAMA_ARG_CACHE_PROMPT": "false"}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.realmodel", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke run: 3 turns, 1 rep")
    parser.add_argument("--turns", type=int, default=6, help="turns per loop (6)")
    parser.add_argument("--reps", type=int, default=3, help="loops per variant (3)")
    parser.add_argument(
        "--output-chars", type=int, default=1200, help="characters per tool output (1200)"
    )
    parser.add_argument(
        "--variants", type=lambda v: tuple(v.split(",")), default=VARIANTS,
        help=f"comma-separated, of {','.join(VARIANTS)} (all)",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder")
    args = parser.parse_args(argv)
    if args.quick:
        args.turns, args.reps = 3, 1
    if not set(args.variants) <= set(VARIANTS):
        parser.error(f"--variants: of {', '.join(VARIANTS)}")
    if args.turns < 2 or args.reps < 1:
        parser.error("--turns must be at least 2 and --reps at least 1")
    return args


@dataclass
class RealStack:
    """A llama-server and a private stack whose workers send it their requests."""

    server: LlamaServer
    local: LocalStack
    client: AsyncOpenAI

    @classmethod
    def start(cls, turns: int, server_env: dict[str, str] | None = None) -> RealStack:
        server = LlamaServer(port=pick_free_ports(1)[0], env=server_env or {})
        server.start()
        # The inject variant's last step is a call too: its step bound completes it.
        env = {**server.worker_env(), "TURNPIKE_WS_INJECT_MAX_STEPS": str(turns)}
        local = LocalStack(StackConfig.private(extra_env=env))
        try:
            local.start()
        except Exception:
            server.stop()
            raise
        ep = local.endpoints
        client = AsyncOpenAI(base_url=ep.base_url, api_key=ep.api_key, max_retries=0, timeout=300)
        return cls(server, local, client)

    async def stop(self) -> None:
        await self.client.close()
        self.local.stop()
        self.server.stop()


def session_for(variant: str, client: AsyncOpenAI, rollout: Rollout) -> Session:
    if variant in (CONNECTION, COLD):
        return WsSession(client, rollout, MODEL, PIPELINE_OF[CONNECTION])
    if variant == INJECT:
        return InjectSession(client, rollout, MODEL, PIPELINE_OF[INJECT])
    return HttpSession(client, rollout, MODEL, PIPELINE_OF[variant], stateless=False)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    corpus = repo_corpus()
    warm = RealStack.start(args.turns)
    try:
        cold = RealStack.start(args.turns, NO_PREFIX_CACHE)
    except BaseException:
        await warm.stop()
        raise
    stacks = {variant: cold if variant == COLD else warm for variant in VARIANTS}
    loops: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    try:
        # As long as the measured loops: the inject variant's step bound is their length.
        log(f"warm-up: one {args.turns}-turn loop per variant (not counted)")
        for variant in args.variants:
            try:
                await one(variant, stacks[variant], corpus, args.turns, args.output_chars, -1)
            except LoopError as exc:
                log(f"warm-up of {variant} failed (not counted): {str(exc)[:300]}")
        for rep in range(args.reps):
            # Alternated: each rep starts one variant later, so no variant always runs
            # first (or last) on a machine whose speed drifts.
            shift = rep % len(args.variants)
            order = args.variants[shift:] + args.variants[:shift]
            for variant in order:
                try:
                    loop = await one(
                        variant, stacks[variant], corpus, args.turns, args.output_chars, rep
                    )
                except LoopError as exc:  # recorded and reported, the run goes on
                    log(f"FAILED rep {rep + 1} {variant}: {str(exc)[:300]}")
                    failures.append({"variant": variant, "rep": rep, "error": str(exc)[:2000]})
                    continue
                loops.append(loop)
                log(
                    f"rep {rep + 1}/{args.reps} {variant}: loop {loop['loop_ms'] / 1000:.2f} s, "
                    f"overhead {sum(t['overhead_ms'] for t in loop['turns']):.0f} ms"
                )
    finally:
        await warm.stop()
        await cold.stop()
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "command": "python -m bench.realmodel " + " ".join(sys.argv[1:]),
        "model": {
            "router_id": MODEL,
            "server": "llama.cpp llama-server",
            "image": warm.server.image,
        },
        "plan": {"turns": args.turns, "reps": args.reps, "output_chars": args.output_chars},
        "loops": loops,
        "failures": failures,
    }


async def one(
    variant: str, stack: RealStack, corpus: dict[str, str], turns: int, chars: int, rep: int
) -> dict[str, Any]:
    rollout = Rollout(uuid.uuid4().hex[:12], corpus, turns, chars, calls_only=True)
    meter = CpuMeter(dict(stack.local.pids))
    meter.start()
    log(f"{variant}, {turns} turns")
    loop = await run_loop(
        session_for(variant, stack.client, rollout),
        rollout,
        variant=variant,
        model=MODEL,
        tool_s=0.0,
        rep=rep,
    )
    loop.service_cpu_ms = meter.stop()
    return loop.record()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    begin = time.monotonic()
    try:
        data = asyncio.run(run(args))
    except LlamaServerError as exc:
        print(f"bench.realmodel: {exc}", file=sys.stderr)
        return 2
    written = report.write(data, args.out)
    log(f"done in {time.monotonic() - begin:.0f} s -> {', '.join(p.name for p in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
