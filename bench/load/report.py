"""The outputs: ``load.json`` (every number), ``load.md`` (the tables, pure text from the
data) and ``load.png`` (``bench.load.plots``), all in one folder."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.load.stats import COLLECTOR, SERVICES
from bench.services.common import markdown_table

JSON, MARKDOWN = "load.json", "load.md"


def _f(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _who(c: dict[str, Any], labels: tuple[str, ...]) -> list[str]:
    """The variant and repeat columns a table has (none for a run of one stack, once)."""
    return [str(c.get(label, "")) for label in labels]


def labels_of(data: dict[str, Any]) -> tuple[str, ...]:
    named = len(data.get("variants") or ()) > 1
    repeated = (data["params"].get("repeats") or 1) > 1
    return ("variant",) * named + ("repeat",) * repeated


def latency_rows(cells: list[dict[str, Any]], labels: tuple[str, ...] = ()) -> list[list[str]]:
    rows = []
    for c in cells:
        t, o = c["turn_ms"], c["overhead_ms"]
        rows.append(
            [
                *_who(c, labels),
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
                str(c.get("retried_count", 0)),
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
    "shed, retried",
]


def cpu_rows(cells: list[dict[str, Any]], labels: tuple[str, ...] = ()) -> list[list[str]]:
    rows = []
    for c in cells:
        per = c["cpu_ms_per_turn"]
        rows.append(
            [
                *_who(c, labels),
                c["transport"],
                str(c["loops"]),
                *(_f(per.get(name), 2) for name in (*SERVICES, "stack")),
                _f((c.get("cpu_hops_per_turn") or {}).get("stack"), 1),
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
    "stack hops",
    "of which idle",
    "client",
    "stack cores",
    "client cores",
]


def error_rows(cells: list[dict[str, Any]], labels: tuple[str, ...] = ()) -> list[list[str]]:
    return [
        [*_who(c, labels), c["transport"], str(c["loops"]), kind, str(count)]
        for c in cells
        for kind, count in c["errors"].items()
    ]


def _pair(figure: dict[str, Any], digits: int = 1) -> str:
    return (
        f"{_f(figure['reference'], digits)} / {_f(figure['value'], digits)} ({_x(figure['ratio'])})"
    )


def comparison_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [
        [
            f"{r['variant']} vs {r['reference']}",
            r["transport"],
            str(r["loops"]),
            _pair(r["overhead_p50"]),
            _pair(r["turns_per_s"]),
            _pair(r["stack_cpu_ms"], 2),
            _pair(r["gateway_cpu_ms"], 2),
        ]
        for r in rows
    ]


COMPARISON_COLUMNS = [
    "variant",
    "transport",
    "loops",
    "overhead p50 ms, reference / variant",
    "turns/s",
    "stack CPU ms/turn",
    "gateway CPU ms/turn",
]


def unit_lines(data: dict[str, Any]) -> list[str]:
    unit = data.get("machine_unit")
    if not unit:
        return []
    start, end = unit["start"], unit["end"]
    return [
        "## The machine's unit",
        "",
        f"CPU figures are in milliseconds of this machine and in **hops**: one hop is the CPU "
        f"(both processes, user + system) of one empty unary gRPC round trip between two "
        f"processes on loopback (`bench/load/machine_unit.py`: grpcio's asyncio API, the "
        f"standard event loop, empty messages, {start['calls']:,} calls in a row, median of "
        f"{start['repeats']}). A turn's API work is a handful of such hops and what the "
        f"services do between them, and a hop's cost moves with the machine as theirs does, "
        f"so a figure in hops compares across machines where milliseconds do not.",
        "",
        f"Here one hop was **{unit['hop_cpu_ms']:.4f} ms** of CPU (measured "
        f"{start['hop_cpu_ms']:.4f} ms before the run and {end['hop_cpu_ms']:.4f} ms after; "
        f"{start['hop']['wall_ms']:.4f} ms wall). One message each way on a stream that stays "
        f"open cost {start['stream_message']['cpu_ms']:.4f} ms.",
        "",
    ]


def variant_lines(data: dict[str, Any]) -> list[str]:
    variants = data.get("variants") or []
    if len(variants) < 2:
        return []
    lines = ["## Variants", ""]
    for v in variants:
        spans = v.get("spans")
        traced = ""
        if spans:
            total = sum(spans.get("spans", {}).values())
            traced = (
                f"; its collector received {total:,} spans in {spans.get('exports', 0):,} exports"
            )
        lines.append(f"- **{v['name']}**: {v['describe']}{traced}")
    lines += [
        "",
        f"Every stack was started before any was measured; at each transport and number of "
        f"loops their cells alternate (forward, then backward), "
        f"{data['params'].get('repeats', 1)} time(s) each. Below, the medians over the "
        f"repeats, each variant against **{variants[0]['name']}** (a ratio under 1 is less "
        "than the reference's).",
        "",
    ]
    lines += markdown_table(
        COMPARISON_COLUMNS, comparison_rows(data["comparisons"]), text_columns=2
    )
    return [*lines, ""]


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
            " (it starts its own stacks, one per variant)."
            if "--variant" in data["command"]
            else " (it starts its own stack)."
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
    labels = labels_of(data)
    lines += ["", *unit_lines(data), *variant_lines(data)]
    lines += ["## Latency and throughput", ""]
    lines += markdown_table(
        [*labels, *LATENCY_COLUMNS], latency_rows(cells, labels), text_columns=1 + len(labels)
    )
    lines += ["", "## CPU per completed turn, ms", ""]
    lines += markdown_table(
        [*labels, *CPU_COLUMNS], cpu_rows(cells, labels), text_columns=1 + len(labels)
    )
    idle = data.get("idle_cpu_ms_per_s") or {}
    if idle and isinstance(next(iter(idle.values())), dict):  # per variant
        idle_text = "; ".join(
            f"{name}: " + ", ".join(f"{k} {v:g}" for k, v in rates.items())
            for name, rates in idle.items()
        )
    else:
        idle_text = ", ".join(f"{k} {v:g}" for k, v in idle.items())
    lines += [
        "",
        "With no traffic the processes spend "
        + idle_text
        + ' ms of CPU per second (health checks, timers): included above; "of which idle" '
        "is that rate over the cell's wall time, per turn, which weighs most where turns "
        "are few per second (one loop). /proc counts in clock ticks (10 ms) per process, "
        "so a service's figure is within 10 ms over the cell's turns. Stack hops: the "
        "stack's CPU per turn in the machine's unit. Cores: CPU time over "
        "wall time, the cores each side kept busy on average (the generator shares the "
        "machine with the stack, and with whatever else runs on it).",
    ]
    if any(COLLECTOR in c["cpu_ms_per_turn"] for c in cells):
        lines += [
            "",
            "The tracing variant's collector, beside the stack (not in it), CPU ms per turn: "
            + ", ".join(
                f"{c.get('variant')} {c['transport']} x{c['loops']}: "
                f"{c['cpu_ms_per_turn'][COLLECTOR]:.2f}"
                for c in cells
                if COLLECTOR in c["cpu_ms_per_turn"]
            )
            + ".",
        ]
    if warmup := data.get("warmup_errors"):
        flat = (
            {f"{name}: {k}": n for name, kinds in warmup.items() for k, n in kinds.items()}
            if isinstance(next(iter(warmup.values())), dict)
            else warmup
        )
        lines += [
            "",
            "The warm-up (not counted) met errors before it went through: "
            + ", ".join(f"{kind} x{count}" for kind, count in flat.items())
            + ".",
        ]
    if errors := error_rows(cells, labels):
        lines += ["", "## Errors", ""]
        lines += markdown_table(
            [*labels, "transport", "loops", "kind", "count"], errors, text_columns=3 + len(labels)
        )
    else:
        lines += ["", "No errors and no dropped connections in any cell."]
    if any(c.get("retried_count") for c in cells):
        lines += [
            "",
            "Shed, retried: refusals that asked to be tried again (503 `server_overloaded`, "
            "a socket refused with 426), which the loops did after the retry-after (1 s), at "
            "most twice, as the official SDK does; not errors, and the wait is in the turn's "
            "latency. The gateway sheds only turns that start a conversation (a rollout's "
            "first) past its adaptive bound; a turn that continues one is refused only at "
            "the ceiling (`TURNPIKE_MAX_IN_FLIGHT`).",
        ]
    lines += ["", "## Plot", "", *(f"![{name}]({name})" for name in data["plots"])]
    return "\n".join(lines) + "\n"


def write(data: dict[str, Any], out_dir: Path) -> list[Path]:
    from bench.load.plots import write_plot  # matplotlib only when writing

    out_dir.mkdir(parents=True, exist_ok=True)
    data["plots"] = [write_plot(data, out_dir)]
    (out_dir / JSON).write_text(json.dumps(data, indent=1) + "\n")
    (out_dir / MARKDOWN).write_text(markdown(data))
    return [out_dir / JSON, out_dir / MARKDOWN, *(out_dir / p for p in data["plots"])]
