"""One task's run, and the numbers per transport drawn from the timed runs (pure: no I/O,
no clock)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.codex.events import ExecEvents
from bench.codex.spans import Request
from bench.codex.wire import WireRequest
from bench.services.common import percentile

HTTP, WEBSOCKET = "http", "websocket"
TRANSPORTS = (HTTP, WEBSOCKET)
# The medians the report sets side by side, as the WebSocket/HTTP ratio.
RATIO_KEYS = (
    "wall_ms",
    "gateway_ms_per_task",
    "overhead_ms",
    "ttft_ms",
    "requests_per_task",
    "input_tokens_per_request",
    "request_bytes",
    "bytes_per_task",
    "input_items_per_request",
)


@dataclass
class TaskRun:
    transport: str  # HTTP or WEBSOCKET: the provider's supports_websockets
    rep: int  # 0 for the untimed warm-up
    wall_ms: float
    exit_code: int
    tool_calls: int
    failed_calls: int
    commands: list[str]
    patches: list[str]
    files_missing: list[str]
    commands_not_run: list[str]  # the task's commands Codex never ran
    requests: list[dict[str, Any]]  # the gateway's span of each generating request
    warmup_requests: int  # Codex's WebSocket warm-ups (generate: false)
    wire: list[dict[str, Any]]  # what Codex sent, per request (its trace log)
    usage: dict[str, int]
    errors: list[str] = field(default_factory=list)

    @property
    def timed(self) -> bool:
        return self.rep > 0

    def problems(self, calls: int) -> list[str]:
        """Why the task did not run as scripted (none: Codex exited 0 having made the
        task's tool calls, and the files its patches add are there)."""
        found = []
        if self.exit_code != 0:
            found.append(f"exit code {self.exit_code}")
        if self.tool_calls < calls:
            found.append(f"{self.tool_calls} of {calls} tool calls")
        if self.commands_not_run:
            found.append(f"never ran {', '.join(f'`{c}`' for c in self.commands_not_run)}")
        if self.files_missing:
            found.append(f"missing {', '.join(self.files_missing)}")
        return found

    def ok(self, calls: int) -> bool:
        return not self.problems(calls)


def task_run(
    transport: str,
    rep: int,
    wall_ms: float,
    exit_code: int,
    events: ExecEvents,
    requests: Sequence[Request],
    wire: Sequence[WireRequest],
    files_missing: list[str],
    task_commands: Sequence[str] = (),
) -> TaskRun:
    generating = [r for r in requests if not r.warmup]
    return TaskRun(
        transport=transport,
        rep=rep,
        wall_ms=round(wall_ms, 3),
        exit_code=exit_code,
        tool_calls=len(events.calls),
        failed_calls=sum(not c.ok for c in events.calls),
        commands=events.commands,
        patches=events.patches,
        files_missing=files_missing,
        commands_not_run=not_run(task_commands, events.commands),
        requests=[
            {k: v for k, v in asdict(r).items() if k not in ("start_ns",)} for r in generating
        ],
        warmup_requests=len(requests) - len(generating),
        wire=[asdict(w) for w in wire],
        usage=dict(events.usage),
        errors=list(events.errors)[:5],
    )


def not_run(task_commands: Sequence[str], ran: Sequence[str]) -> list[str]:
    """The commands of the task that none of ``ran`` is (Codex runs each through a shell:
    ``/bin/bash -lc 'git status'``)."""
    shown = {c.rstrip().removesuffix("'").removesuffix('"') for c in ran}
    return [
        c
        for c in dict.fromkeys(task_commands)
        if not any(s == c or s.endswith((f" {c}", f"'{c}", f'"{c}')) for s in shown)
    ]


def _median(values: Sequence[float]) -> float | None:
    return round(statistics.median(values), 3) if values else None


def _p90(values: Sequence[float]) -> float | None:
    return round(percentile(values, 90), 3) if values else None


def summarize(runs: Sequence[TaskRun], calls: int) -> dict[str, Any]:
    """The timed runs of one transport."""
    timed = [r for r in runs if r.timed]
    requests = [q for r in timed for q in r.requests]
    sent = [w for r in timed for w in r.wire if w["generate"]]
    overhead = [q["overhead_ms"] for q in requests if q["overhead_ms"] is not None]
    ttft = [q["ttft_ms"] for q in requests if q["ttft_ms"] is not None]
    gateway = [sum(q["gateway_ms"] for q in r.requests) for r in timed]
    shares = [g / r.wall_ms for g, r in zip(gateway, timed, strict=True) if r.wall_ms]
    input_tokens = [q["input_tokens"] for q in requests]
    cached = sum(q["cached_tokens"] for q in requests)
    return {
        "tasks": len(timed),
        "tasks_ok": sum(r.ok(calls) for r in timed),
        "wall_ms": {
            "median": _median([r.wall_ms for r in timed]),
            "all": [r.wall_ms for r in timed],
        },
        "gateway_ms_per_task": {"median": _median(gateway)},
        "gateway_share_of_wall": {"median": _median(shares)},
        "overhead_ms": {"median": _median(overhead), "p90": _p90(overhead), "n": len(overhead)},
        "ttft_ms": {"median": _median(ttft), "p90": _p90(ttft), "n": len(ttft)},
        "tool_calls_per_task": {
            "median": _median([r.tool_calls for r in timed]),
            "min": min((r.tool_calls for r in timed), default=None),
        },
        "requests_per_task": {"median": _median([len(r.requests) for r in timed])},
        "warmup_requests_per_task": {"median": _median([r.warmup_requests for r in timed])},
        "input_tokens_per_request": {"median": _median(input_tokens)},
        "cached_share": round(cached / sum(input_tokens), 4) if sum(input_tokens) else None,
        "request_bytes": {"median": _median([w["bytes"] for w in sent]), "n": len(sent)},
        "bytes_per_task": {
            "median": _median([sum(w["bytes"] for w in r.wire) for r in timed if r.wire])
        },
        "input_items_per_request": {"median": _median([w["input_items"] for w in sent])},
        "previous_response_id_share": (
            round(sum(w["previous_response_id"] for w in sent) / len(sent), 4) if sent else None
        ),
        "store_values": sorted({str(w["store"]).lower() for w in sent}),
    }


def ratios(by_transport: dict[str, dict[str, Any]]) -> dict[str, float | None]:
    """WebSocket / HTTP of each median of ``RATIO_KEYS``."""
    out: dict[str, float | None] = {}
    http, ws = by_transport.get(HTTP), by_transport.get(WEBSOCKET)
    for key in RATIO_KEYS:
        a = (http or {}).get(key, {}).get("median")
        b = (ws or {}).get(key, {}).get("median")
        out[key] = round(b / a, 3) if a and b is not None else None
    return out
