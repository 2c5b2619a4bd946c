"""What both admission benchmarks share: tenants and their keys, one HTTP request and its
answer (``shoot``: status, error code, latency, headers, even when the answer is a 429 or
a 503), the billing ledger's events, and the run's metadata."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import hashlib
import json
import os
import secrets
import sqlite3
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from bench.load.__main__ import command_line
from bench.load.report import run_line
from bench.load.stats import dist
from bench.load.transports import SseChannel, TurnFailed
from bench.loop.stack import Target, start_local
from bench.services.common import log, machine_info, percentile

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results"
P = TypeVar("P", bound="DataclassInstance")  # a plan, a dataclass
COMPLETED = "completed"
TIMEOUT = "timeout"
PROGRESS_EVERY_S = 5.0


# -- tenants -----------------------------------------------------------------------------


def mint_key(tenant: str) -> str:
    """A fresh API key for ``tenant`` (only its hash goes into the tenants file)."""
    return f"sk-bench-{tenant}-{secrets.token_hex(16)}"


def key_hash(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def tenants_yaml(tenants: Mapping[str, tuple[str, Mapping[str, int]]]) -> str:
    """A tenants file: tenant name -> (its key, its limits), keys stored as hashes."""
    lines = ["tenants:"]
    for name, (key, limits) in tenants.items():
        lines += [f"  {name}:", f'    keys: ["{key_hash(key)}"]']
        lines += [f"    {limit}: {value}" for limit, value in limits.items()]
    return "\n".join(lines) + "\n"


def start_stack(extra_env: Mapping[str, str], label: str) -> Target:
    """A private stack on free ports, every process given ``extra_env``."""
    shown = ", ".join(
        f"{k}={Path(v).name if k.endswith('_FILE') else v}" for k, v in extra_env.items()
    )
    log(f"starting a stack ({label}{': ' + shown if shown else ''})")
    target = start_local(extra_env)
    log(f"  {target.description}")
    return target


# -- one request -------------------------------------------------------------------------


class AnswerChannel(SseChannel):
    """The load generator's HTTP/SSE channel, also keeping the answer's headers (a 429's
    ``retry-after`` and ``x-ratelimit-*``)."""

    def _reset(self) -> None:
        super()._reset()
        self.headers: dict[str, str] = {}

    def on_header(self, name: bytes, value: bytes) -> None:  # an httptools callback
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")


@dataclass(frozen=True, slots=True)
class Shot:
    """One request and how it was answered. ``outcome``: ``completed``, ``timeout`` or the
    failure's kind ("HTTP 429: rate_limit_exceeded", "response.failed: ..."); ``status``:
    the HTTP status (200 for a stream that ended otherwise than completed, 0 without an
    answer). Times in ms from the request's start (the connect included); ``at_s``: its
    start on the run's clock."""

    at_s: float
    latency_ms: float
    status: int
    outcome: str
    retry_after: str | None = None
    ttft_ms: float | None = None
    output_tokens: int = 0
    response_id: str | None = None

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Output tokens over the time from the first delta to the terminal event: the
        pace once streaming (the simulator's schedule is absolute from the first token,
        so a stream that started late catches up here, and its lateness shows only in
        the time to first token and ``delivered_tokens_per_s``)."""
        if self.ttft_ms is None or self.output_tokens < 2 or self.latency_ms <= self.ttft_ms:
            return None
        return self.output_tokens / ((self.latency_ms - self.ttft_ms) / 1000)

    @property
    def delivered_tokens_per_s(self) -> float | None:
        """Output tokens over the whole wait, connect to terminal event: what the client
        got."""
        if not self.output_tokens or self.latency_ms <= 0:
            return None
        return self.output_tokens / (self.latency_ms / 1000)


def status_of(kind: str) -> int:
    if kind.startswith("HTTP "):
        return int(kind[5:8])
    return 200 if kind.startswith("response.") else 0


async def shoot(
    channel: AnswerChannel, body: dict[str, Any], timeout_s: float, origin: float
) -> Shot:
    """Send ``body`` on ``channel`` (connecting first if it is closed) and wait for the
    terminal event or the error answer, at most ``timeout_s``."""
    start = time.perf_counter()
    at = start - origin
    try:
        async with asyncio.timeout(timeout_s):
            if not channel.is_open:
                await channel.open()
            reply = await channel.turn(body)
    except TimeoutError:
        await channel.close()  # its state is unknown
        return Shot(at, (time.perf_counter() - start) * 1000, 0, TIMEOUT)
    except TurnFailed as err:
        latency = (time.perf_counter() - start) * 1000
        status = status_of(err.kind)
        retry_after = channel.headers.get("retry-after") if status else None
        return Shot(at, latency, status, err.kind, retry_after)
    latency = (time.perf_counter() - start) * 1000
    sent_after = latency - reply.turn_ms  # the connect, when it was opened here
    usage = reply.response.get("usage") or {}
    return Shot(
        at,
        latency,
        200,
        COMPLETED,
        ttft_ms=sent_after + reply.ttft_ms,
        output_tokens=usage.get("output_tokens") or 0,
        response_id=reply.response.get("id"),
    )


def by_outcome(shots: Iterable[Shot]) -> dict[str, dict[str, Any]]:
    """Per outcome: how many, with which status, their latency, and how many carried a
    ``retry-after``; the most frequent first."""
    groups: dict[str, list[Shot]] = defaultdict(list)
    for shot in shots:
        groups[shot.outcome].append(shot)
    return {
        outcome: {
            "count": len(group),
            "status": group[0].status,
            "latency_ms": dist([s.latency_ms for s in group]),
            "with_retry_after": sum(s.retry_after is not None for s in group),
        }
        for outcome, group in sorted(groups.items(), key=lambda kv: -len(kv[1]))
    }


def low(values: list[float], q: float = 10) -> float | None:
    """The ``q``-th percentile from the bottom (the slow tail of a rate)."""
    return round(percentile(values, q), 3) if values else None


async def progress(label: str, line: Callable[[], str]) -> None:
    """A progress line every few seconds while a phase runs (cancelled at its end)."""
    start = time.perf_counter()
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        log(f"    {label}, {time.perf_counter() - start:.0f} s: {line()}")


async def with_progress(label: str, line: Callable[[], str], work: Awaitable[Any]) -> Any:
    ticker = asyncio.create_task(progress(label, line))
    try:
        return await work
    finally:
        ticker.cancel()


# -- the billing ledger ------------------------------------------------------------------


def ledger_events(path: Path) -> dict[str, str]:
    """Every billed event in the ledger: response id -> tenant (read-only, beside the
    billing service's own connection)."""
    if not path.exists():
        return {}
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        return dict(db.execute("SELECT event_id, tenant FROM usage_events"))


def ledger_check(
    seen: Mapping[str, Iterable[str]], billed: Mapping[str, str], before: Iterable[str] = ()
) -> dict[str, Any]:
    """Every response a client saw completed is billed (the ledger's key is the response
    id: once at most), and nothing else was billed since ``before``. ``seen``: client
    label -> the response ids it saw completed."""
    earlier = set(before)
    new = {rid: tenant for rid, tenant in billed.items() if rid not in earlier}
    clients: dict[str, Any] = {}
    everyone: set[str] = set()
    for label, ids in seen.items():
        ids = set(ids)
        everyone |= ids
        missing = sorted(ids - new.keys())
        tenants = sorted({new[rid] for rid in ids if rid in new})
        clients[label] = {
            "completed": len(ids),
            "billed": len(ids) - len(missing),
            "missing": len(missing),
            "missing_ids": missing[:5],
            "billed_as": tenants,
        }
    extra = sorted(new.keys() - everyone)
    per_tenant: dict[str, int] = defaultdict(int)
    for tenant in new.values():
        per_tenant[tenant] += 1
    return {
        "clients": clients,
        "ledger_events": len(new),
        "ledger_events_by_tenant": dict(sorted(per_tenant.items())),
        "billed_not_completed": len(extra),
        "billed_not_completed_ids": extra[:5],
        "pass": not extra and all(c["missing"] == 0 for c in clients.values()),
    }


# -- the run -----------------------------------------------------------------------------


def parser(prog: str, description: str, quick: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {quick}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder")
    parser.add_argument("--model", help="model id (turnpike-sim: 1,000 tokens/s)")
    parser.add_argument("--note", help="a line on the machine and its load, for the report")
    return parser


Option = tuple[str, str, Callable[[str], Any], str]  # flag, the plan's field, type, help


def parse_plan(
    parser: argparse.ArgumentParser, argv: list[str], options: list[Option], full: P, quick: P
) -> tuple[argparse.Namespace, P]:
    """Parse the command line, ``options`` included; the plan is the full or the quick one
    (``--quick``) with what the command line gave (and ``--model``) in place of its
    defaults."""
    for flag, name, kind, text in options:
        parser.add_argument(flag, dest=name, type=kind, help=text, metavar=flag[2:].upper())
    args = parser.parse_args(argv)
    given = {name: getattr(args, name) for _, name, _, _ in options} | {"model": args.model}
    plan = replace(
        quick if args.quick else full, **{k: v for k, v in given.items() if v is not None}
    )
    return args, plan


@dataclass
class Run:
    """When and where a run happened, for its report."""

    argv: list[str]
    make_target: str
    quick: bool
    note: str | None
    began: float = 0.0
    loadavg_start: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        self.began = time.monotonic()
        self.loadavg_start = tuple(round(x, 2) for x in os.getloadavg())

    def header(self, title: str) -> dict[str, Any]:
        return {
            "title": title,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "mode": "quick" if self.quick else "full",
            "command": command_line(self.argv, self.make_target),
            "duration_s": round(time.monotonic() - self.began, 1),
            "machine": machine_info()
            | {
                "loadavg_start": list(self.loadavg_start),
                "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            },
            "note": self.note,
        }


def report_head(data: dict[str, Any], intro: str) -> list[str]:
    """The report's first lines: how to run it again, when, on what, what it does
    (``intro``), and its targets."""
    lines = [
        f"# {data['title']}",
        "",
        f"Reproduced with `{data['command']}` (it starts its own stacks on free ports).",
        "",
        run_line(data),
        "",
    ]
    if data.get("note"):
        lines += [f"**Machine and load:** {data['note']}", ""]
    return [*lines, intro, "", "## Targets", "", *targets_lines(data["targets"])]


def fmt(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def ratio(value: float | None, base: float | None) -> float | None:
    return round(value / base, 3) if value is not None and base else None


def verdict(passed: bool | None) -> str:
    return {True: "pass", False: "**miss**", None: "-"}[passed]


def targets_lines(targets: list[dict[str, Any]]) -> list[str]:
    """The report's table of targets: each question, its goal, what was measured."""
    lines = [
        "| question | goal | measured | verdict | detail |",
        "| --- | --- | ---: | --- | --- |",
    ]
    for t in targets:
        lines.append(
            f"| {t['name']} | {t['goal']} | {fmt(t['measured'], 2)} | {verdict(t['pass'])} | "
            f"{t['detail']} |"
        )
    return lines


def write_results(
    data: dict[str, Any],
    out_dir: Path,
    stem: str,
    markdown: Callable[[dict[str, Any]], str],
    plot: Callable[[dict[str, Any], Path], None],
) -> list[Path]:
    """``<stem>.json`` (every number), ``<stem>.md`` and ``<stem>.png`` into ``out_dir``;
    then a line per target and the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = [out_dir / f"{stem}.json", out_dir / f"{stem}.md", out_dir / f"{stem}.png"]
    plot(data, written[2])
    written[0].write_text(json.dumps(data, indent=1) + "\n")
    written[1].write_text(markdown(data))
    for t in data["targets"]:
        log(f"{t['name']}: {verdict(t['pass'])}, {t['detail']}")
    log("done -> " + ", ".join(p.name for p in written))
    return written
