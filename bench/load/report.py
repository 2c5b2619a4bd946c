"""The outputs: ``load.json`` (every number), ``load.md`` (the tables, pure text from the
data) and ``load.png`` (``bench.load.plots``), all in one folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.load.stats import SERVICES
from bench.services.common import markdown_table

JSON, MARKDOWN = "load.json", "load.md"


def _f(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def latency_rows(cells: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for c in cells:
        t, o = c["turn_ms"], c["overhead_ms"]
        rows.append(
            [
                c["transport"],
                str(c["loops"]),
                f"{c['turns_ok']:,}/{c['turns_sent']:,}",
                _f(c["turns_per_s"]),
                f"{_f(t['p50'])} / {_f(t['p90'])} / {_f(t['p99'])}",
                _f(o["p50"]),
                _f(o["p90"]),
                _f(o["p99"]),
                _x(c.get("overhead_p50_vs_1")),
                _f(c["ttft_ms"]["p50"]),
                str(c["error_count"]),
                str(c["dropped"]),
            ]
        )
    return rows


LATENCY_COLUMNS = [
    "transport",
    "loops",
    "turns ok/sent",
    "turns/s",
    "turn p50 / p90 / p99 ms",
    "overhead p50 ms",
    "p90",
    "p99",
    "p50 vs 1 loop",
    "TTFT p50 ms",
    "errors",
    "dropped",
]


def cpu_rows(cells: list[dict[str, Any]]) -> list[list[str]]:
    rows = []
    for c in cells:
        per = c["cpu_ms_per_turn"]
        rows.append(
            [
                c["transport"],
                str(c["loops"]),
                *(_f(per.get(name), 2) for name in (*SERVICES, "stack")),
                _f(c.get("idle_cpu_ms_per_turn"), 2),
                _f(c["client_cpu_ms_per_turn"], 2),
                _f(c["stack_cores"], 2),
                _f(c["client_cores"], 2),
            ]
        )
    return rows


CPU_COLUMNS = [
    "transport",
    "loops",
    *SERVICES,
    "stack",
    "of which idle",
    "client",
    "stack cores",
    "client cores",
]


def error_rows(cells: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [c["transport"], str(c["loops"]), kind, str(count)]
        for c in cells
        for kind, count in c["errors"].items()
    ]


def run_line(data: dict[str, Any], more: str = "") -> str:
    """When and on what a run was made, in italics (``more`` added at its end)."""
    m = data["machine"]
    return (
        f"_{data['mode']} run, {data['date']}, {data['duration_s']:.0f} s; "
        f"{m['cpu_count']} CPUs, {m['implementation']} {m['python']} ({m['platform']}); "
        f"load average before {m['loadavg_start']} and after {m['loadavg_end']}{more}._"
    )


def markdown(data: dict[str, Any]) -> str:
    p, cells = data["params"], data["cells"]
    lines = [
        "# Load: agent loops at once, as operators see them",
        "",
        f"Reproduced with `{data['command']}`"
        + (
            " (it starts its own stack)."
            if "--start-stack" in data["command"]
            else " against a stack started by `make run`."
        ),
        "",
        run_line(data, f"; {data['stack']}"),
        "",
    ]
    if data.get("note"):
        lines += [f"**Machine and load:** {data['note']}", ""]
    lines += [
        f"Each loop is the agent-loop benchmark's rollout (`bench/loop/rollout.py`): "
        f"instructions, {p['tools']} function tools, a task, then tool outputs of "
        f"~{p['output_chars'] / 1000:.0f} KB of source plus a user nudge, chained with "
        f"`previous_response_id`, {p['turns']} turns a rollout, on `{p['model']}`. "
        f"N loops run at once (started over {p['stagger_s']:g} s), each on a connection of "
        "its own, each playing rollouts back to back until the cell has at least "
        f"{p['min_turns']} turns; no tool time. Transports without the SDK: WebSocket "
        f"({p['clients']['websocket']}, one `response.create` frame per turn) and HTTP "
        f"with SSE ({p['clients']['http']}, `stream: true`), on the gateway's default "
        "pipeline for each (connection and sprint). The warm-up (one short loop per "
        "transport) is not counted.",
        "",
        "Per turn: latency = request handed to the transport -> terminal event; API overhead "
        "= latency - the worker's model time (`turnpike.model_ms.total_ms` of the response); "
        "percentiles are nearest-rank over every completed turn of the cell. turns/s = "
        "completed turns over the cell's wall time. CPU = each process's user + system time "
        "(`/proc/<pid>/stat`) from the first connect to the last terminal event plus "
        "billing's catch-up, over completed turns; the workers summed; client = this "
        "generator's own process.",
        "",
        "## Targets",
        "",
        "| question | measured | detail |",
        "| --- | ---: | --- |",
    ]
    for t in data["targets"]:
        verdict = {True: " (pass)", False: " (**miss**)", None: ""}[t.get("pass")]
        goal = f"goal {t['goal']}{verdict}; " if t.get("goal") else ""
        lines.append(f"| {t['name']} | {_f(t['measured'], 2)} | {goal}{t['detail']} |")
    lines += ["", "## Latency and throughput", ""]
    lines += markdown_table(LATENCY_COLUMNS, latency_rows(cells), text_columns=1)
    lines += ["", "## CPU per completed turn, ms", ""]
    lines += markdown_table(CPU_COLUMNS, cpu_rows(cells), text_columns=1)
    idle = data.get("idle_cpu_ms_per_s") or {}
    lines += [
        "",
        "With no traffic the processes spend "
        + ", ".join(f"{k} {v:g}" for k, v in idle.items())
        + ' ms of CPU per second (health checks, timers): included above; "of which idle" '
        "is that rate over the cell's wall time, per turn, which weighs most where turns "
        "are few per second (one loop). /proc counts in clock ticks (10 ms) per process, "
        "so a service's figure is within 10 ms over the cell's turns. Cores: CPU time over "
        "wall time, the cores each side kept busy on average (the generator shares the "
        "machine with the stack, and with whatever else runs on it).",
    ]
    if warmup := data.get("warmup_errors"):
        lines += [
            "",
            "The warm-up (not counted) met errors before it went through: "
            + ", ".join(f"{kind} x{count}" for kind, count in warmup.items())
            + ".",
        ]
    if errors := error_rows(cells):
        lines += ["", "## Errors", ""]
        lines += markdown_table(["transport", "loops", "kind", "count"], errors, text_columns=3)
    else:
        lines += ["", "No errors and no dropped connections in any cell."]
    lines += ["", "## Plot", "", *(f"![{name}]({name})" for name in data["plots"])]
    return "\n".join(lines) + "\n"


def write(data: dict[str, Any], out_dir: Path) -> list[Path]:
    from bench.load.plots import write_plot  # matplotlib only when writing

    out_dir.mkdir(parents=True, exist_ok=True)
    data["plots"] = [write_plot(data, out_dir)]
    (out_dir / JSON).write_text(json.dumps(data, indent=1) + "\n")
    (out_dir / MARKDOWN).write_text(markdown(data))
    return [out_dir / JSON, out_dir / MARKDOWN, *(out_dir / p for p in data["plots"])]
