"""``loop.md``: the benchmark's tables (targets, results per speed and tool time, where
the time goes, load), from the summarized data."""

from __future__ import annotations

import math
from typing import Any

from bench.loop.analysis import STAGE_ORDER, find, reference_cell_key, speed_label
from bench.loop.variants import DIRECT, LEGACY, VARIANTS
from bench.services.common import markdown_table

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


def _f(value: Any, digits: int = 1, scale: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value * scale:,.{digits}f}"


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
        legacy = find(cells, speed, tool_ms, LEGACY)
        lines += [
            f"**{speed_label(speed)}, tool time {tool_ms:g} ms** "
            f"(n = {legacy['n'] if legacy else '?'})",
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
    found = [find(data["cells"], speed, tool_ms, v) for v in VARIANTS if v != DIRECT]
    cells = [c for c in found if c]
    if not cells:
        return []
    stages = [s for s in STAGE_ORDER if any(c["stages_ms_last_turn"].get(s) for c in cells)]
    stages += sorted(
        {s for c in cells for s in c["stages_ms_last_turn"]} - set(stages) - {"generate"}
    )
    out = [
        f"## Where the time goes ({speed_label(speed)}, tool time {tool_ms:g} ms)",
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
