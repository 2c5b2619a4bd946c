"""The outputs: ``codex.json`` (every number), ``codex.md`` (the table and what differs
between the transports, text drawn from the data) and ``codex.png`` (``bench.codex.plots``),
all in one folder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.codex.stats import HTTP, WEBSOCKET
from bench.services.common import markdown_table

JSON, MARKDOWN = "codex.json", "codex.md"


def _f(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _kb(value: float | None) -> str:
    return "-" if value is None else f"{value / 1000:,.1f} KB"


def _n(value: float | None) -> str:
    return _f(value, 0)


# (label, the summary's key, its field or None, how to show it, ratio shown): the medians
# with a ratio are the keys of ``stats.RATIO_KEYS``.
ROWS: list[tuple[str, str, str | None, Callable[[Any], str], bool]] = [
    ("wall time per task, median ms", "wall_ms", "median", _n, True),
    ("time at the gateway per task, median ms", "gateway_ms_per_task", "median", _n, True),
    ("... share of the wall time, median", "gateway_share_of_wall", "median", _pct, False),
    ("requests per task, median", "requests_per_task", "median", _n, True),
    ("+ warm-up requests (generate: false)", "warmup_requests_per_task", "median", _n, False),
    ("API overhead per request, median ms", "overhead_ms", "median", _f, True),
    ("API overhead per request, p90 ms", "overhead_ms", "p90", _f, False),
    ("TTFT at the gateway per request, median ms", "ttft_ms", "median", _f, True),
    ("input tokens per request, median", "input_tokens_per_request", "median", _n, True),
    ("cached share of input tokens", "cached_share", None, _pct, False),
    ("request size, median", "request_bytes", "median", _kb, True),
    ("bytes sent per task, median", "bytes_per_task", "median", _kb, True),
    ("input items per request, median", "input_items_per_request", "median", _n, True),
    ("requests with previous_response_id", "previous_response_id_share", None, _pct, False),
]


def _cells(s: dict[str, Any] | None) -> list[str]:
    """A transport's column, in the order of the table's rows."""
    if s is None:
        return ["-"] * (len(ROWS) + 3)
    calls = s["tool_calls_per_task"]
    return [
        f"{s['tasks_ok']}/{s['tasks']}",
        f"{_n(calls['median'])} ({_n(calls['min'])})",
        *(show(s[key][field] if field else s[key]) for _, key, field, show, _ in ROWS),
        ", ".join(s["store_values"]) or "-",
    ]


def summary_rows(data: dict[str, Any]) -> list[list[str]]:
    http = _cells(data["transports"].get(HTTP))
    ws = _cells(data["transports"].get(WEBSOCKET))
    labels = ["tasks ok / timed", "tool calls per task, median (min)"]
    labels += [label for label, *_ in ROWS] + ["store"]
    ratios = ["", ""]
    ratios += [_x(data["ratios"].get(key)) if shown else "" for _, key, _, _, shown in ROWS]
    ratios += [""]
    return [list(row) for row in zip(labels, http, ws, ratios, strict=True)]


def differences(data: dict[str, Any]) -> str:
    """What the two transports put on the wire and what it cost, in words, from the data."""
    http = data["transports"].get(HTTP)
    ws = data["transports"].get(WEBSOCKET)
    if not http or not ws:
        return "Only one transport ran; nothing to compare."
    r = data["ratios"]
    parts = []
    if http["request_bytes"]["n"] and ws["request_bytes"]["n"]:
        parts.append(
            f"Over HTTP Codex sends the whole conversation with every request: a median of "
            f"{_f(http['input_items_per_request']['median'], 0)} input items and "
            f"{_kb(http['request_bytes']['median'])} per request (store: "
            f"{', '.join(http['store_values'])}; {_pct(http['previous_response_id_share'])} "
            f"name a previous response), {_kb(http['bytes_per_task']['median'])} per task. "
            f"Over WebSocket {_pct(ws['previous_response_id_share'])} of its requests chain "
            f"`previous_response_id` and carry only the items since the last response "
            f"(median {_f(ws['input_items_per_request']['median'], 0)}): "
            f"{_kb(ws['request_bytes']['median'])} per request (the tool definitions are "
            f"resent each time), {_kb(ws['bytes_per_task']['median'])} per task "
            f"({_x(r.get('bytes_per_task'))} HTTP's, its warm-up included)."
        )
    else:
        parts.append("Codex's request bodies were not captured (its trace log had none).")
    parts.append(
        f"The model sees the same context either way: "
        f"{_f(http['input_tokens_per_request']['median'], 0)} vs "
        f"{_f(ws['input_tokens_per_request']['median'], 0)} input tokens per request (median), "
        f"{_pct(http['cached_share'])} vs {_pct(ws['cached_share'])} of them read from the "
        f"prefix cache, since the gateway rebuilds the history from the chain."
    )
    if ws["warmup_requests_per_task"]["median"]:
        parts.append(
            f"Over WebSocket Codex also opens each task with "
            f"{_f(ws['warmup_requests_per_task']['median'], 0)} warm-up request "
            f"(`generate: false`), which the gateway answers without the model."
        )
    parts.append(
        f"API overhead per request (the turn's time at the gateway minus the model's) has a "
        f"median of {_f(http['overhead_ms']['median'])} ms over HTTP and "
        f"{_f(ws['overhead_ms']['median'])} ms over WebSocket ({_x(r.get('overhead_ms'))}); "
        f"TTFT {_f(http['ttft_ms']['median'])} vs {_f(ws['ttft_ms']['median'])} ms "
        f"({_x(r.get('ttft_ms'))}). A whole task took {_f(http['wall_ms']['median'], 0)} vs "
        f"{_f(ws['wall_ms']['median'], 0)} ms ({_x(r.get('wall_ms'))}), of which its "
        f"responses spent {_f(http['gateway_ms_per_task']['median'], 0)} vs "
        f"{_f(ws['gateway_ms_per_task']['median'], 0)} ms at the gateway "
        f"({_pct(http['gateway_share_of_wall']['median'])} vs "
        f"{_pct(ws['gateway_share_of_wall']['median'])}, model time included); the rest is "
        f"Codex itself, starting up and running the commands."
    )
    return " ".join(parts)


def run_rows(data: dict[str, Any]) -> list[list[str]]:
    rows = []
    for run in data["runs"]:
        problems = "; ".join(run["problems"])
        rows.append(
            [
                run["transport"],
                "warm-up" if run["rep"] == 0 else str(run["rep"]),
                _f(run["wall_ms"], 0),
                str(run["tool_calls"]),
                str(len(run["requests"])),
                _kb(sum(w["bytes"] for w in run["wire"])) if run["wire"] else "-",
                f"**no**: {problems}" if problems else "yes",
            ]
        )
    return rows


def markdown(data: dict[str, Any], plot: str | None) -> str:
    p = data["params"]
    m = data["machine"]
    lines = [
        "# Codex CLI on a scripted task: HTTP against WebSocket",
        "",
        "Reproduced with `make bench-codex` (it starts a stack of its own).",
        "",
        f"_{data['date']}, {data['duration_s']:.0f} s; {m['cpu_count']} CPUs, "
        f"{m['implementation']} {m['python']} ({m['platform']}); load average before "
        f"{m['load_average']}; {data['target']}._",
        "",
        f"The real Codex CLI (`codex exec`, {p['codex_version']}) runs one task in a fresh git "
        f"repository (one committed README.md) on `{p['model']}`, whose simulator follows a "
        f"numbered plan with one tool call per step: {p['calls']} steps, "
        f"{len(data['task']['commands'])} read-only commands and "
        f"{len(data['task']['added_files'])} patches that add "
        f"{', '.join(data['task']['added_files'])} (checked after every run), then a "
        f"closing message. Transports: the provider's `supports_websockets = false` (HTTP "
        f"with SSE) and `true` (WebSocket), interleaved, {p['reps']} timed runs each after "
        f"one untimed warm-up each; sandbox `{p['sandbox']}`.",
        "",
        "Wall time: `codex exec` started to exited. Per request, from the gateway's span of "
        "each response (exported over OTLP to this benchmark): API overhead "
        "(`turnpike.overhead_ms`), TTFT at the gateway (`turnpike.ttft_ms`), input and "
        "cached tokens (`gen_ai.usage.*`). Request sizes and input items: the bodies Codex "
        "sent, from its own trace log. Medians and p90 (nearest rank) over every timed "
        "request.",
        "",
    ]
    if data["span_attributes_missing"]:
        lines += [
            f"**The gateway's spans lacked {', '.join(data['span_attributes_missing'])}**: "
            "those rows are empty.",
            "",
        ]
    failed = [r for r in data["runs"] if r["rep"] > 0 and r["problems"]]
    if failed:
        timed = sum(r["rep"] > 0 for r in data["runs"])
        lines += [
            f"**{len(failed)} of {timed} timed runs did not run as scripted** (see Every run: "
            f"{failed[0]['problems'][0]}, ...); their numbers are in the table all the same.",
            "",
        ]
    lines += [
        "## Per transport",
        "",
        *markdown_table(["", "HTTP", "WebSocket", "WS / HTTP"], summary_rows(data), 1),
        "",
        "## Where the transports differ",
        "",
        differences(data),
        "",
    ]
    if plot:
        lines += [f"![Codex over HTTP and WebSocket]({plot})", ""]
    lines += [
        "## Every run",
        "",
        *markdown_table(
            ["transport", "rep", "wall ms", "tool calls", "requests", "sent", "task done"],
            run_rows(data),
            2,
        ),
        "",
    ]
    return "\n".join(lines)


def write(data: dict[str, Any], out_dir: Path, plot: str | None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / JSON).write_text(json.dumps(data, indent=1) + "\n")
    (out_dir / MARKDOWN).write_text(markdown(data, plot))
