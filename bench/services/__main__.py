"""``python -m bench.services``: run the service benchmarks and write their results."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.services.common import Budget, Context, log, start_services, write_readme, write_report

SERVICES = ("tokenizer", "safety", "worker", "router", "billing")
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results" / "services"

# Repetitions per measurement point: at least min_n, then until `seconds` are spent on it.
FULL_BUDGET = Budget(min_n=15, max_n=400, seconds=1.0)
QUICK_BUDGET = Budget(min_n=3, max_n=20, seconds=0.05)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.services", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, a smoke run (< 30 s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder")
    parser.add_argument(
        "--only",
        default=",".join(SERVICES),
        help=f"comma-separated subset of {','.join(SERVICES)}",
    )
    args = parser.parse_args(argv)
    args.only = [s.strip() for s in args.only.split(",") if s.strip()]
    if unknown := [s for s in args.only if s not in SERVICES]:
        parser.error(f"unknown service(s) {unknown}; choose from {', '.join(SERVICES)}")
    return args


async def run_all(ctx: Context, modules: list) -> None:
    for module in modules:
        name = module.__name__.rsplit(".", 1)[-1]
        log(f"== {name}")
        report = await module.run(ctx)
        write_report(report, ctx.out_dir, ctx.quick)
        log(f"== {name} done in {report.duration_s:.1f} s -> {ctx.out_dir / (name + '.md')}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    modules = [importlib.import_module(f"bench.services.{name}") for name in args.only]
    needs = sorted({proc for module in modules for proc in module.NEEDS})
    state_dir = Path(tempfile.mkdtemp(prefix="turnpike-bench-"))
    log(f"starting {', '.join(needs)} (state in {state_dir})")
    stack, addresses = start_services(needs, state_dir)
    try:
        log(f"ready in {stack.ready_after_s:.1f} s: {addresses}")
        ctx = Context(
            quick=args.quick,
            out_dir=args.out.resolve(),
            addresses=addresses,
            budget=QUICK_BUDGET if args.quick else FULL_BUDGET,
        )
        asyncio.run(run_all(ctx, modules))
    finally:
        stack.stop()
        if failed := [p for p in stack.exited() if p.returncode != 0]:
            for proc in failed:
                print(proc.describe("after the benchmark"), file=sys.stderr)
        shutil.rmtree(state_dir, ignore_errors=True)
    readme = write_readme(args.out.resolve(), SERVICES)
    log(f"done in {time.monotonic() - began:.1f} s -> {readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
