"""The benchmark's PNG plots, from the summarized data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.loop.analysis import STAGE_ORDER, find, reference_cell_key, speed_label
from bench.loop.variants import (
    CONNECTION,
    DIRECT,
    INJECT,
    LEGACY,
    SPRINT,
    STATELESS,
    VARIANTS,
)

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
    INJECT: "#17becf",
    DIRECT: "#7f7f7f",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, path: Path, rect: tuple[float, float, float, float] | None = None) -> None:
    fig.tight_layout(rect=rect)
    fig.savefig(path)
    plt.close(fig)


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
    ax.set_title(f"{title} ({speed_label(speed)}, tool time {tool_ms:g} ms)")
    ax.set_xlabel("turn (history grows ~1k tokens per turn)")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _save(plt, fig, path)


def plot_speedup(data: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.4), dpi=110)
    tools = sorted({c["tool_ms"] for c in data["cells"]})
    for variant in (INJECT, CONNECTION, SPRINT, STATELESS, DIRECT):
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
    _save(plt, fig, path)


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
        found = [find(data["cells"], speed, tool_ms, v) for v in VARIANTS]
        cells = [c for c in found if c]
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
            f"{speed_label(speed)}"
            + (f" (legacy {legacy['loop_ms'] / 1000:.1f} s)" if legacy else "")
        )
        ax.tick_params(axis="x", labelsize=7)
        ax.set_ylabel("seconds per loop (median)")
        ax.grid(True, axis="y", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.suptitle(f"Where a loop's time goes (tool time {tool_ms:g} ms)")
    _save(plt, fig, path, rect=(0, 0.07, 1, 1))


def plot_stages(data: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    speed, tool_ms = reference_cell_key(data)
    found = [find(data["cells"], speed, tool_ms, v) for v in VARIANTS if v != DIRECT]
    cells = [c for c in found if c]
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
    fig.suptitle(f"{speed_label(speed)}, tool time {tool_ms:g} ms")
    _save(plt, fig, path, rect=(0, 0.08, 1, 1))


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
    _save(plt, fig, path)


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
    _save(plt, fig, path)


def write_plots(data: dict[str, Any], out_dir: Path) -> list[str]:
    """Every plot the data has numbers for, into ``out_dir``; their file names."""
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
    return plots
