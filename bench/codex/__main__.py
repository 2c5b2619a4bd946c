"""``python -m bench.codex`` (``make bench-codex``): the real Codex CLI runs one scripted
task (``bench.codex.task``: read-only commands and two patches, one tool call each) in a
fresh git repository, over HTTP and over WebSocket, interleaved; per transport the wall
time per task, and per request the API overhead, TTFT and tokens from the gateway's
spans, and what Codex sent from its own trace log. Results in ``bench/results/``
(``codex.json``, ``codex.md``, ``codex.png``); progress on stderr.

Starts a stack of its own on free ports, exporting its traces over OTLP/gRPC to a
receiver this benchmark runs on loopback. ``--base-url`` uses a running stack instead:
it must export its traces to the receiver's port (``--otlp-port``).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.codex import plots, report
from bench.codex.cli import MODEL, codex_binary, codex_home, run_codex
from bench.codex.events import parse_events
from bench.codex.spans import Request, missing_attributes, response_requests, within
from bench.codex.stats import HTTP, TRANSPORTS, WEBSOCKET, TaskRun, ratios, summarize, task_run
from bench.codex.task import MIN_CALLS, Task, scripted_task
from bench.codex.wire import WIRE_LOG, parse_wire_log
from bench.codex.workspace import make_repo, missing_files
from bench.loop.stack import DEFAULT_ROUTER, StackMissing, Target, running, start_local
from bench.otlp import Receiver, exporter_env
from bench.services.common import machine_info
from turnpike.router.registry import ModelRegistry, load_models

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results"
COMMAND = "make bench-codex"
SPAN_WAIT_S = 15.0
_STARTED = time.monotonic()


def log(message: str) -> None:
    """One progress line on stderr, with the seconds since the run started."""
    print(f"[{time.monotonic() - _STARTED:6.1f}s] {message}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.codex",
        description="The Codex CLI on a scripted task, over HTTP and over WebSocket.",
    )
    parser.add_argument("--reps", type=int, default=5, help="timed runs per transport (5)")
    parser.add_argument(
        "--calls", type=int, default=12, help=f"tool calls in the task (12; at least {MIN_CALLS})"
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 rep, 10 calls")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder")
    parser.add_argument(
        "--base-url", help="a running stack's /v1 URL (default: start a stack on free ports)"
    )
    parser.add_argument(
        "--start-stack", action="store_true", help="start a stack on free ports (the default)"
    )
    parser.add_argument("--api-key", default="sk-turnpike-dev", help="with --base-url")
    parser.add_argument(
        "--otlp-port",
        type=int,
        default=0,
        help="the trace receiver's port on 127.0.0.1 (0: a free one; with --base-url, the "
        "port the stack exports to)",
    )
    parser.add_argument("--model", default=MODEL)
    parser.add_argument(
        "--sandbox",
        default="workspace-write",
        choices=("read-only", "workspace-write", "danger-full-access"),
        help="Codex's sandbox for the commands it runs (workspace-write)",
    )
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per task (180)")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.calls = 1, MIN_CALLS
    if args.calls < MIN_CALLS or args.reps < 1:
        parser.error(f"--calls must be at least {MIN_CALLS} and --reps at least 1")
    return args


def context_window(model: str) -> int:
    for entry in ModelRegistry(load_models()).models():
        if entry.id == model:
            return entry.context_window
    raise SystemExit(f"the model registry has no {model}")


class Bench:
    """The runs of one benchmark: a task, one Codex home per transport, the spans."""

    def __init__(self, args: argparse.Namespace, target: Target, receiver: Receiver) -> None:
        self.args = args
        self.target = target
        self.receiver = receiver
        self.task: Task = scripted_task(args.calls)
        self.scratch = Path(tempfile.mkdtemp(prefix="bench-codex-"))
        window = context_window(args.model)
        self.homes = {
            t: codex_home(
                self.scratch / f"home-{t}",
                target.base_url,
                websockets=t == WEBSOCKET,
                model=args.model,
                context_window=window,
                # Codex's default tools, the freeform apply_patch among them.
                refused_tools_off=False,
            )
            for t in TRANSPORTS
        }
        self.runs: list[TaskRun] = []

    def one(self, transport: str, rep: int) -> TaskRun:
        repo = make_repo(self.scratch / f"{transport}-{rep}")
        start_ns = time.time_ns()
        started = time.perf_counter()
        result = run_codex(
            self.homes[transport],
            repo,
            self.task.prompt(),
            api_key=self.target.api_key,
            timeout_s=self.args.timeout,
            extra_args=("--json", "--sandbox", self.args.sandbox),
            extra_env={"RUST_LOG": WIRE_LOG},
        )
        wall_ms = (time.perf_counter() - started) * 1000
        end_ns = time.time_ns()
        events = parse_events(result.stdout)
        wire = parse_wire_log(result.stderr)
        expected = len(wire) or len(events.calls) + 1
        requests = self.spans_of(start_ns, end_ns, expected)
        run = task_run(
            transport,
            rep,
            wall_ms,
            result.exit_code,
            events,
            requests,
            wire,
            missing_files(repo, self.task.added_files),
            self.task.commands,
        )
        if result.exit_code != 0 and not run.errors:
            run.errors.append(result.stderr.strip().splitlines()[-1][:300] if result.stderr else "")
        self.runs.append(run)
        log(describe(run, self.task.calls))
        return run

    def spans_of(self, start_ns: int, end_ns: int, expected: int) -> list[Request]:
        """The task's responses, once the gateway exported the ``expected`` many (or what
        arrived within SPAN_WAIT_S)."""

        def found(spans) -> list[Request]:
            mine = within(response_requests(spans), start_ns, end_ns)
            return mine if len(mine) >= expected else []

        got = self.receiver.poll(found, SPAN_WAIT_S)
        return got or within(response_requests(self.receiver.spans()), start_ns, end_ns)

    def all(self) -> None:
        for transport in TRANSPORTS:
            log(f"warm-up {transport} (untimed)")
            self.one(transport, 0)
        for rep in range(1, self.args.reps + 1):
            for transport in TRANSPORTS:  # interleaved: http, websocket, http, ...
                self.one(transport, rep)


def describe(run: TaskRun, calls: int) -> str:
    overhead = [q["overhead_ms"] for q in run.requests if q["overhead_ms"] is not None]
    mean = f"{sum(overhead) / len(overhead):.1f} ms" if overhead else "-"
    problems = run.problems(calls) + run.errors
    state = "FAILED: " + "; ".join(problems) if problems else "ok"
    return (
        f"{run.transport:9} {'warm-up' if run.rep == 0 else f'rep {run.rep}'}: "
        f"{run.wall_ms / 1000:.2f} s, {run.tool_calls} tool calls, {len(run.requests)} "
        f"requests (+{run.warmup_requests} warm-up), mean overhead {mean}, "
        f"{sum(w['bytes'] for w in run.wire) / 1000:.1f} KB sent; {state}"
    )


def results(bench: Bench, date: str, duration_s: float, machine: dict) -> dict[str, Any]:
    by_transport = {
        t: summarize([r for r in bench.runs if r.transport == t], bench.task.calls)
        for t in TRANSPORTS
    }
    return {
        "date": date,
        "duration_s": round(duration_s, 1),
        "machine": machine,
        "target": bench.target.description,
        "params": {
            "calls": bench.task.calls,
            "reps": bench.args.reps,
            "model": bench.args.model,
            "sandbox": bench.args.sandbox,
            "order": "warm-up http, warm-up websocket, then http, websocket per rep",
            "codex_version": importlib.metadata.version("openai-codex-cli-bin"),
        },
        "task": {
            "prompt": bench.task.prompt(),
            "commands": list(bench.task.commands),
            "added_files": list(bench.task.added_files),
        },
        "span_attributes_missing": missing_attributes(bench.receiver.spans()),
        "transports": by_transport,
        "ratios": ratios(by_transport),
        "runs": [{**vars(r), "problems": r.problems(bench.task.calls)} for r in bench.runs],
    }


def start_target(args: argparse.Namespace, receiver: Receiver) -> Target:
    if args.base_url:
        log(f"using the stack at {args.base_url}; its traces must go to port {receiver.port}")
        return running(args.base_url, args.api_key, DEFAULT_ROUTER, COMMAND)
    log(f"starting a stack on free ports, tracing to 127.0.0.1:{receiver.port}")
    return start_local(exporter_env(receiver.port))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if codex_binary() is None:
        print("The openai-codex-cli-bin wheel is not installed (make venv).", file=sys.stderr)
        return 2
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    machine = machine_info()
    receiver = Receiver()
    receiver.start("127.0.0.1", args.otlp_port)
    try:
        target = start_target(args, receiver)
    except StackMissing as exc:
        receiver.stop()
        print(exc, file=sys.stderr)
        return 2
    bench: Bench | None = None
    try:
        bench = Bench(args, target, receiver)
        log(f"{bench.task.calls}-call task, {args.reps} timed runs per transport")
        bench.all()
        data = results(bench, date, time.monotonic() - _STARTED, machine)
    finally:
        target.stop()
        receiver.stop()
        if bench is not None:
            shutil.rmtree(bench.scratch, ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    plot = plots.write_plot(data, args.out)
    report.write(data, args.out, plot)
    if data["span_attributes_missing"]:
        log(f"the gateway's spans lacked {', '.join(data['span_attributes_missing'])}")
    for transport in (HTTP, WEBSOCKET):
        s = data["transports"][transport]
        log(
            f"{transport}: {s['tasks_ok']}/{s['tasks']} tasks ok, wall median "
            f"{s['wall_ms']['median']} ms, overhead median {s['overhead_ms']['median']} ms"
        )
    log(f"wrote {args.out / report.JSON}, {args.out / report.MARKDOWN}, {plot}")
    failed = [r for r in bench.runs if r.timed and not r.ok(bench.task.calls)]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
