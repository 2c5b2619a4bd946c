"""The outputs: ``loop.json`` (every raw number, the summaries, the targets), ``loop.md``
(the tables) and the PNG plots, all in one folder."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.loop.analysis import FAST, find
from bench.loop.variants import CONNECTION, DIRECT, LEGACY, SPRINT, STATELESS, VARIANTS
from bench.services.common import markdown_table

PLOTS = {
    "overhead": "loop_overhead_per_turn.png",
    "ttft": "loop_ttft_per_turn.png",
    "speedup": "loop_speedup.png",
    "breakdown": "loop_breakdown.png",
    "stages": "loop_stages.png",
    "load": "loop_concurrency.png",
    "capacity": "loop_capacity.png",
}
COLORS = {
    LEGACY: "#d62728",
    SPRINT: "#ff7f0e",
    STATELESS: "#9467bd",
    CONNECTION: "#2ca02c",
    DIRECT: "#7f7f7f",
}
RESULT_COLUMNS = [
    "variant",
    "loop s",
    "vs legacy",
    "follow-up TTFT ms",
    "1st TTFT ms",
    "overhead/turn 2nd ms",
    "overhead/turn last ms",
    "model s",
    "API s",
    "tool+client s",
]
STAGE_ORDER = (
    "load_conversation",
    "validate_history",
    "resolve_model",
    "safety",
    "resolve_images",
    "render",
    "route",
)


def _speed(value: float) -> str:
    return f"{value:,.0f} tok/s"


def _f(value: Any, digits: int = 1, scale: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value * scale:,.{digits}f}"


def reference_cell_key(data: dict[str, Any]) -> tuple[float, float]:
    """The (speed, tool) pair the per-turn plots show: 1,000 tok/s and no tool time when
    run, else the first pair that was."""
    pairs = [(c["tokens_per_second"], c["tool_ms"]) for c in data["cells"]]
    return (FAST, 0.0) if (FAST, 0.0) in pairs else pairs[0]


# -- Markdown --------------------------------------------------------------------------------


def markdown(data: dict[str, Any]) -> str:
    p = data["params"]
    cells = data["cells"]
    lines = [
        "# Agent loop benchmark",
        "",
        f"Reproduced with `{data['command']}`"
        + (
            " (the benchmark starts its own stack)."
            if "--start-stack" in data["command"]
            else " against a stack started by `make run`."
        ),
        "",
        f"_{data['mode']} run, {data['date']}, {data['duration_s']:.0f} s; "
        f"{data['machine']['cpu_count']} CPUs, {data['machine']['implementation']} "
        f"{data['machine']['python']}; load average before {data['machine']['loadavg_start']} "
        f"and after {data['machine']['loadavg_end']}; {data['stack']}._",
        "",
        f"A scripted Codex-like rollout driven by the official `openai` SDK: instructions "
        f"(~{p['instructions_chars'] / 1000:.1f} KB, with a per-run id so no two runs share a "
        f"worker's prefix cache), {p['tools']} function tools, a task, then "
        f"{p['turns'] - 1} tool calls whose outputs are ~{p['output_chars'] / 1000:.0f} KB "
        f"of this repository's source each, so the last request holds "
        f"~{p['history_tokens_last']:,} tokens. Each follow-up sends the tool output plus a "
        "short user nudge (the simulator answers a bare tool output with a message, which "
        "ends the loop; that is the last turn). Variants run interleaved, rotating the order "
        f"every repetition; medians over {p['reps_text']}.",
        "",
        "Per turn: TTFT = request handed to the SDK -> first delta event; API overhead = "
        "client-observed turn time - the model time the worker reports; loop = wall time of "
        "the whole loop (socket connect, turns, tool time). Follow-up TTFT = mean over turns "
        '2..N of a loop. "X% less time" = 1 - t/t(legacy); the factor t(legacy)/t is '
        "shown as speed-up.",
        "",
        "## Targets",
        "",
        "| target | goal | measured | result |",
        "| --- | --- | ---: | --- |",
    ]
    for t in data["targets"]:
        verdict = {True: "pass", False: "**miss**", None: "n/a"}[t["pass"]]
        measured = "-" if t["measured"] is None else f"{t['measured']:.2f}"
        lines.append(f"| {t['name']} | {t['target']} | {measured} | {verdict}: {t['detail']} |")
    if data.get("failures"):
        lines += [
            "",
            f"**{len(data['failures'])} loop(s) failed** and are left out of the medians "
            "(errors in `loop.json`, `failures`).",
        ]
    lines += ["", "## Results", ""]
    pairs = sorted({(c["tokens_per_second"], c["tool_ms"]) for c in cells})
    for speed, tool_ms in pairs:
        lines += [
            f"**{_speed(speed)}, tool time {tool_ms:g} ms** "
            f"(n = {find(cells, speed, tool_ms, LEGACY)['n'] if find(cells, speed, tool_ms, LEGACY) else '?'})",
            "",
        ]
        rows = []
        for variant in VARIANTS:
            c = find(cells, speed, tool_ms, variant)
            if c is None:
                continue
            vs = "-"
            if c.get("speedup_vs_legacy") and variant != LEGACY:
                cut = c["reduction_vs_legacy"]
                less = f"{cut:.0%} less" if cut >= 0 else f"{-cut:.0%} more"
                vs = f"{c['speedup_vs_legacy']:.2f}x ({less})"
            rows.append(
                [
                    variant,
                    _f(c["loop_ms"], 2, 1e-3),
                    vs,
                    _f(c["followup_ttft_ms"]),
                    _f(c["first_ttft_ms"]),
                    _f(c["overhead_turn2_ms"]),
                    _f(c["overhead_last_ms"]),
                    _f(c["model_ms"], 2, 1e-3),
                    _f(c["overhead_ms"], 2, 1e-3),
                    _f(c["tool_client_ms"], 2, 1e-3),
                ]
            )
        lines += markdown_table(RESULT_COLUMNS, rows, text_columns=1)
        lines.append("")
    lines += _stage_section(data)
    lines += _load_section(data)
    lines += ["## Plots", ""]
    lines += [f"![{name}]({name})\n" for name in data["plots"]]
    return "\n".join(lines) + "\n"


def _stage_section(data: dict[str, Any]) -> list[str]:
    speed, tool_ms = reference_cell_key(data)
    cells = [find(data["cells"], speed, tool_ms, v) for v in VARIANTS if v != DIRECT]
    cells = [c for c in cells if c]
    if not cells:
        return []
    stages = [s for s in STAGE_ORDER if any(c["stages_ms_last_turn"].get(s) for c in cells)]
    stages += sorted(
        {s for c in cells for s in c["stages_ms_last_turn"]} - set(stages) - {"generate"}
    )
    out = [
        f"## Where the time goes ({_speed(speed)}, tool time {tool_ms:g} ms)",
        "",
        "The gateway's own stage timers (`turnpike.stages_ms`, pre-inference stages) at the "
        '2nd and the last turn; "other" is the rest of the API overhead: HTTP/WebSocket '
        "and SSE framing, the SDK's own work in this process, the worker hop (through the "
        "image proxy on legacy), storing and billing before the terminal event.",
        "",
    ]
    rows = []
    for c in cells:
        for label, key, overhead in (
            ("2nd", "stages_ms_turn2", c["overhead_turn2_ms"]),
            ("last", "stages_ms_last_turn", c["overhead_last_ms"]),
        ):
            values = [c[key].get(s) or 0.0 for s in stages]
            other = (overhead or 0.0) - sum(values)
            rows.append([c["variant"], label, *map(_f, values), _f(other), _f(overhead)])
    out += markdown_table(["variant", "turn", *stages, "other", "overhead"], rows, text_columns=2)
    cpu_cells = [c for c in [*cells, find(data["cells"], speed, tool_ms, DIRECT)] if c]
    services = sorted({s for c in cpu_cells for s in c["service_cpu_ms_per_turn"]})
    if cpu_cells:
        out += [
            "",
            "CPU time per turn, ms (median over loops; the stack's processes from /proc, "
            '"client" is this benchmark process: the SDK and its parsing; "SDK send" is '
            "the wall time until the SDK's create call returned: on the WebSocket its "
            "encoding and the frame's send, over HTTP until the response headers):",
            "",
            *markdown_table(
                ["variant", "SDK send", "client", *services],
                [
                    [
                        c["variant"],
                        _f(c.get("send_ms_per_turn")),
                        _f(c["client_cpu_ms_per_turn"]),
                        *(_f(c["service_cpu_ms_per_turn"].get(s)) for s in services),
                    ]
                    for c in cpu_cells
                ],
                text_columns=1,
            ),
        ]
    return [*out, ""]


def _load_section(data: dict[str, Any]) -> list[str]:
    load = data.get("load")
    if not load:
        return []
    stream = load["one_connection"]
    out = [
        "## Load",
        "",
        f"**One WebSocket connection, {stream['model']}** (long answers asked for by length, "
        "back to back with `previous_response_id`):",
        "",
        *markdown_table(
            ["turn", "output tokens", "delta events", "client tok/s", "worker tok/s", "turn ms"],
            [
                [
                    str(t["turn"]),
                    f"{t['output_tokens']:,}",
                    f"{t['delta_events']:,}",
                    _f(t["client_tokens_per_s"], 0),
                    _f(t["worker_tokens_per_s"], 0),
                    _f(t["turn_ms"], 0),
                ]
                for t in stream["turns"]
            ],
        ),
    ]
    many = load["concurrent_loops"]
    out += [
        "",
        f"**{many['loops']} concurrent agent loops** (connection mode, one socket each, "
        f"{load['params']['loop_turns']} turns, {many['model']}), against the same rollout "
        "alone:",
        "",
        *markdown_table(
            [
                "tool ms",
                "overhead/turn alone ms",
                "under load median ms",
                "p90 ms",
                "ratio",
                "loop alone s",
                "loop under load s",
                "output tok/s",
                "input tok/s",
                "turns/s",
            ],
            [
                [
                    f"{c['tool_ms']:g}",
                    _f(c["single"]["overhead_ms"]["median"]),
                    _f(c["concurrent"]["overhead_ms"]["median"]),
                    _f(c["concurrent"]["overhead_ms"]["p90"]),
                    f"{c['overhead_ratio']:.2f}x",
                    _f(c["single"]["loop_ms_median"], 2, 1e-3),
                    _f(c["concurrent"]["loop_ms_median"], 2, 1e-3),
                    _f(c["concurrent"]["output_tokens_per_s"], 0),
                    _f(c["concurrent"]["input_tokens_per_s"], 0),
                    _f(c["concurrent"]["turns_per_s"]),
                ]
                for c in many["cells"]
            ],
        ),
    ]
    for c in many["cells"]:
        if b := c.get("cpu_budget"):
            out += ["", _budget_line(c["tool_ms"], b)]
    return [*out, "", *_sweep_section(many.get("sweep"))]


def _budget_line(tool_ms: float, b: dict[str, Any]) -> str:
    parts = [f"this client {b['client_cpu_ms_per_turn']:.1f} ms"]
    if "cpu_ms_per_turn" in b:
        parts = [f"{k} {v:.1f} ms" for k, v in b["cpu_ms_per_turn"].items() if v >= 0.05]
    line = (
        f"CPU per turn under load (tool {tool_ms:g} ms): " + ", ".join(parts) + ". "
        f"The loops ask for {b['demand_turns_per_s']:,.0f} turns/s at their single-loop pace"
    )
    if "stack_capacity_turns_per_s" in b:
        line += (
            f"; the stack alone ({b['stack_cpu_ms_per_turn']:.1f} ms of CPU per turn) could "
            f"serve about {b['stack_capacity_turns_per_s']:,.0f} turns/s on all {b['cores']} "
            "cores, with no client and nothing else on the machine"
        )
    if "machine_capacity_turns_per_s" in b:
        line += (
            "; with these SDK clients on the same machine, about "
            f"{b['machine_capacity_turns_per_s']:,.0f} turns/s"
        )
    if "client_cores_at_demand" in b:
        line += (
            f". At the asked pace the SDK clients alone ({b['client_cpu_ms_per_turn']:.1f} ms "
            f"of CPU per turn) would need {b['client_cores_at_demand']:.1f} cores of the "
            f"machine's {b['cores']}"
        )
    return line + "."


def _sweep_section(sweep: dict[str, Any] | None) -> list[str]:
    if not sweep:
        return []
    best = sweep["max_loops_within_2x"]
    rows = [
        [
            str(point["loops"]),
            _f(point["overhead_ms"]["median"]),
            _f(point["overhead_ms"]["p90"]),
            f"{point['overhead_ratio']:.2f}x",
            _f(point["turns_per_s"]),
            _f(point["cpu_budget"]["demand_turns_per_s"]),
            _f(point["cpu_budget"].get("stack_cpu_ms_per_turn")),
            _f(point["cpu_budget"]["client_cpu_ms_per_turn"]),
        ]
        for point in sweep["points"]
    ]
    headers = [
        "loops at once",
        "overhead/turn median ms",
        "p90 ms",
        "ratio",
        "turns/s delivered",
        "turns/s asked",
        "stack CPU ms/turn",
        "client CPU ms/turn",
    ]
    return [
        f"**Capacity sweep** (tool {sweep['tool_ms']:g} ms; one loop alone: "
        f"{sweep['alone_overhead_ms']:.1f} ms of overhead per turn). Largest number of loops "
        f"at once within 2x of that: **{best if best is not None else 'none'}**.",
        "",
        *markdown_table(headers, rows),
        "",
    ]


# -- plots ---------------------------------------------------------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def plot_per_turn(data: dict[str, Any], path: Path, key: str, ylabel: str, title: str) -> None:
    plt = _pyplot()
    speed, tool_ms = reference_cell_key(data)
    fig, ax = plt.subplots(figsize=(7.5, 4.4), dpi=110)
    for variant in VARIANTS:
        c = find(data["cells"], speed, tool_ms, variant)
        if c is None:
            continue
        ys = c["per_turn"][key]
        ax.plot(range(1, len(ys) + 1), ys, "o-", ms=3, label=variant, color=COLORS[variant])
    ax.set_title(f"{title} ({_speed(speed)}, tool time {tool_ms:g} ms)")
    ax.set_xlabel("turn (history grows ~1k tokens per turn)")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_speedup(data: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.4), dpi=110)
    tools = sorted({c["tool_ms"] for c in data["cells"]})
    for variant in (CONNECTION, SPRINT, STATELESS, DIRECT):
        for style, tool_ms in zip(("o-", "s--", "^:"), tools, strict=False):
            points = sorted(
                (c["tokens_per_second"], c["speedup_vs_legacy"])
                for c in data["cells"]
                if c["variant"] == variant
                and c["tool_ms"] == tool_ms
                and c.get("speedup_vs_legacy")
            )
            if not points:
                continue
            xs, ys = zip(*points, strict=True)
            label = f"{variant} (tool {tool_ms:g} ms)"
            ax.plot(xs, ys, style, label=label, color=COLORS[variant], ms=4)
    ax.axhline(1.0, color=COLORS[LEGACY], lw=1, label="legacy-http")
    ax.set_xscale("log")
    speeds = sorted({c["tokens_per_second"] for c in data["cells"]})
    ax.set_xticks(speeds, [f"{s:,.0f}" for s in speeds])
    ax.set_xlabel("model speed (tokens/s)")
    ax.set_ylabel("end-to-end speed-up over legacy (x)")
    ax.set_title("Whole agent loop: speed-up over legacy HTTP")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_breakdown(data: dict[str, Any], path: Path) -> None:
    """Stacked model / API / tool+client time per variant, one panel per speed: where the
    loop's time goes, and why the gain shrinks when the model is slow."""
    plt = _pyplot()
    tools = sorted({c["tool_ms"] for c in data["cells"]})
    tool_ms = tools[-1]  # the realistic tool time when run, so all three parts show
    speeds = sorted({c["tokens_per_second"] for c in data["cells"]})
    fig, axes = plt.subplots(1, len(speeds), figsize=(4.2 * len(speeds), 4.8), dpi=110)
    axes = [axes] if len(speeds) == 1 else list(axes)
    for ax, speed in zip(axes, speeds, strict=True):
        cells = [find(data["cells"], speed, tool_ms, v) for v in VARIANTS]
        cells = [c for c in cells if c]
        names = [c["variant"].replace("-", "\n", 1) for c in cells]
        model = [c["model_ms"] / 1000 for c in cells]
        api = [c["overhead_ms"] / 1000 for c in cells]
        tool = [c["tool_client_ms"] / 1000 for c in cells]
        ax.bar(names, model, color="#4c72b0", label="model (worker)")
        ax.bar(names, api, bottom=model, color="#dd8452", label="API overhead")
        ax.bar(
            names,
            tool,
            bottom=[m + a for m, a in zip(model, api, strict=True)],
            color="#55a868",
            label="tool + client",
        )
        legacy = find(data["cells"], speed, tool_ms, LEGACY)
        for i, c in enumerate(cells):
            total = model[i] + api[i] + tool[i]
            share = f"{c['overhead_ms'] / c['loop_ms']:.0%} API"
            ax.text(i, total, share, ha="center", va="bottom", fontsize=7)
        ax.set_title(
            f"{_speed(speed)}" + (f" (legacy {legacy['loop_ms'] / 1000:.1f} s)" if legacy else "")
        )
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylabel("seconds per loop (median)")
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.suptitle(f"Where a loop's time goes (tool time {tool_ms:g} ms)")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path)
    plt.close(fig)


def plot_stages(data: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    speed, tool_ms = reference_cell_key(data)
    cells = [find(data["cells"], speed, tool_ms, v) for v in VARIANTS if v != DIRECT]
    cells = [c for c in cells if c]
    stages = [s for s in STAGE_ORDER if any(c["stages_ms_last_turn"].get(s) for c in cells)]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), dpi=110, sharex=True)
    cmap = plt.get_cmap("tab10")
    for ax, (label, key, total) in zip(
        axes,
        (
            ("2nd turn", "stages_ms_turn2", "overhead_turn2_ms"),
            ("last turn", "stages_ms_last_turn", "overhead_last_ms"),
        ),
        strict=True,
    ):
        for row, c in enumerate(cells):
            left = 0.0
            for i, stage in enumerate(stages):
                width = c[key].get(stage) or 0.0
                ax.barh(row, width, left=left, color=cmap(i), label=stage if row == 0 else None)
                left += width
            other = max(0.0, (c[total] or 0.0) - left)
            ax.barh(row, other, left=left, color="#cccccc", label="other" if row == 0 else None)
        ax.set_yticks(range(len(cells)), [c["variant"] for c in cells])
        ax.set_title(f"API overhead by stage, {label}")
        ax.set_xlabel("ms (median over loops)")
        ax.grid(True, axis="x", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=8)
    fig.suptitle(f"{_speed(speed)}, tool time {tool_ms:g} ms")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path)
    plt.close(fig)


def plot_load(data: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    import matplotlib.ticker

    many = data["load"]["concurrent_loops"]
    fig, ax = plt.subplots(figsize=(7.5, 4.4), dpi=110)
    for i, cell in enumerate(many["cells"]):
        for kind, style in (("single", "--"), ("concurrent", "-")):
            values = sorted(t["overhead_ms"] for loop in cell[kind]["raw"] for t in loop["turns"])
            ys = [(j + 1) / len(values) for j in range(len(values))]
            label = (
                f"{'1 loop' if kind == 'single' else str(many['loops']) + ' loops'}, "
                f"tool {cell['tool_ms']:g} ms"
            )
            ax.plot(values, ys, style, color=f"C{i}", label=label)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.set_xlabel("per-turn API overhead, ms (log)")
    ax.set_ylabel("fraction of turns")
    ax.set_title(f"Connection mode: one loop vs {many['loops']} at once ({many['model']})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_capacity(data: dict[str, Any], path: Path) -> None:
    """Overhead ratio against loops at once (left); turns per second delivered against
    what the loops ask for at their single-loop pace (right): where they part, the CPU
    has run out."""
    plt = _pyplot()
    import matplotlib.ticker

    sweep = data["load"]["concurrent_loops"]["sweep"]
    points = sweep["points"]
    loops = [p["loops"] for p in points]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=110)
    left.plot(loops, [p["overhead_ratio"] for p in points], "o-", color=COLORS[CONNECTION])
    left.axhline(2, color="#444", linestyle="--", linewidth=1, label="target: 2x")
    left.set_yscale("log")
    left.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    left.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    left.set_xlabel("agent loops at once")
    left.set_ylabel("per-turn overhead / one loop alone (log)")
    left.set_title("Per-turn API overhead under load")
    left.legend(fontsize=8)
    asked = [p["cpu_budget"]["demand_turns_per_s"] for p in points]
    right.plot(loops, asked, "--", color="#444", label="asked (single-loop pace)")
    right.plot(
        loops,
        [p["turns_per_s"] for p in points],
        "o-",
        color=COLORS[CONNECTION],
        label="delivered",
    )
    for key, style, label in (
        ("stack_capacity_turns_per_s", ":", "CPU limit: the stack alone"),
        ("machine_capacity_turns_per_s", "-.", "CPU limit: the stack and these clients"),
    ):
        limit = [p["cpu_budget"].get(key) for p in points]
        if all(limit):
            right.plot(loops, limit, style, color=COLORS[LEGACY], label=label)
    right.set_xlabel("agent loops at once")
    right.set_ylabel("turns per second")
    right.set_title(f"Throughput ({points[0]['cpu_budget']['cores']} cores)")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _round(value: Any) -> Any:
    return round(value, 2) if isinstance(value, float) else value


def columns(turns: list[dict[str, Any]]) -> dict[str, Any]:
    """A loop's per-turn records as columns (one list per field, nested dicts per key):
    the same numbers in a third of the bytes."""
    if not turns:
        return {}
    out: dict[str, Any] = {}
    for key, first in turns[0].items():
        if isinstance(first, dict):
            names = sorted({name for t in turns for name in t[key]})
            out[key] = {n: [_round(t[key].get(n)) for t in turns] for n in names}
        else:
            out[key] = [_round(t[key]) for t in turns]
    return out


def compact(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` for loop.json: every raw loop's turns stored as columns."""

    def loops(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**loop, "turns": columns(loop["turns"])} for loop in raw]

    out = {**data, "loops": loops(data["loops"])}
    if data.get("load"):
        many = data["load"]["concurrent_loops"]
        cells = [
            {
                **cell,
                "single": {**cell["single"], "raw": loops(cell["single"]["raw"])},
                "concurrent": {**cell["concurrent"], "raw": loops(cell["concurrent"]["raw"])},
            }
            for cell in many["cells"]
        ]
        out["load"] = {**data["load"], "concurrent_loops": {**many, "cells": cells}}
    return out


def write(data: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = [PLOTS["overhead"], PLOTS["ttft"], PLOTS["speedup"], PLOTS["breakdown"]]
    plot_per_turn(
        data,
        out_dir / PLOTS["overhead"],
        "overhead_ms",
        "API overhead per turn (ms)",
        "API overhead per turn",
    )
    plot_per_turn(
        data,
        out_dir / PLOTS["ttft"],
        "ttft_ms",
        "time to first token (ms)",
        "Time to first token per turn",
    )
    plot_speedup(data, out_dir / PLOTS["speedup"])
    plot_breakdown(data, out_dir / PLOTS["breakdown"])
    if any(c["variant"] != DIRECT and c["stages_ms_last_turn"] for c in data["cells"]):
        plot_stages(data, out_dir / PLOTS["stages"])
        plots.append(PLOTS["stages"])
    if data.get("load"):
        plot_load(data, out_dir / PLOTS["load"])
        plots.append(PLOTS["load"])
        if data["load"]["concurrent_loops"].get("sweep"):
            plot_capacity(data, out_dir / PLOTS["capacity"])
            plots.append(PLOTS["capacity"])
    data["plots"] = plots
    (out_dir / "loop.json").write_text(json.dumps(compact(data), separators=(",", ":")) + "\n")
    (out_dir / "loop.md").write_text(markdown(data))
    return [out_dir / "loop.json", out_dir / "loop.md", *(out_dir / p for p in plots)]
