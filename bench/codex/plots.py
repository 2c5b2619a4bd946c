"""``codex.png``: wall time per task, each timed run; and per request of the task (median
over the runs), the request's size on the wire, its API overhead and its TTFT at the
gateway, one line per transport."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from bench.codex.stats import TRANSPORTS

PLOT = "codex.png"
COLORS = {"websocket": "#2ca02c", "http": "#ff7f0e"}


def per_index(series: list[list[float]]) -> tuple[list[int], list[float]]:
    """The median of each position over runs of possibly different lengths (1-based)."""
    longest = max((len(s) for s in series), default=0)
    xs, ys = [], []
    for i in range(longest):
        values = [s[i] for s in series if i < len(s)]
        xs.append(i + 1)
        ys.append(statistics.median(values))
    return xs, ys


def write_plot(data: dict[str, Any], out_dir: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    runs = [r for r in data["runs"] if r["rep"] > 0]
    transports = [t for t in TRANSPORTS if any(r["transport"] == t for r in runs)]
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), dpi=100)
    wall, size, overhead, ttft = axes.flat
    for i, transport in enumerate(transports):
        mine = [r for r in runs if r["transport"] == transport]
        color = COLORS.get(transport)
        walls = [r["wall_ms"] / 1000 for r in mine]
        wall.scatter([i] * len(walls), walls, color=color, alpha=0.7, zorder=3)
        wall.hlines(statistics.median(walls), i - 0.25, i + 0.25, color=color, lw=2)
        sent = [[w["bytes"] / 1000 for w in r["wire"] if w["generate"]] for r in mine]
        if any(sent):
            size.plot(*per_index(sent), "o-", color=color, ms=3, label=transport)
        for ax, key in ((overhead, "overhead_ms"), (ttft, "ttft_ms")):
            series = [[q[key] for q in r["requests"] if q[key] is not None] for r in mine]
            if any(series):
                ax.plot(*per_index(series), "o-", color=color, ms=3, label=transport)
    wall.set_xticks(range(len(transports)), transports)
    wall.set_xlim(-0.6, len(transports) - 0.4)
    wall.set_ylim(bottom=0)
    wall.set_title("Wall time per task (each run; bar: median)")
    wall.set_ylabel("s (codex exec start to exit)")
    for ax, title, ylabel in (
        (size, "Request size on the wire", "KB (Codex's request body)"),
        (overhead, "API overhead per request", "ms (gateway turn - model)"),
        (ttft, "TTFT at the gateway per request", "ms"),
    ):
        ax.set_title(title)
        ax.set_xlabel("request of the task (median over runs)")
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        if ax.has_data():
            ax.legend(fontsize=8)
    for ax in axes.flat:
        ax.grid(True, alpha=0.3)
    p = data["params"]
    fig.suptitle(
        f"Codex CLI, {p['calls']}-call scripted task on {p['model']}, "
        f"{p['reps']} runs per transport"
    )
    fig.tight_layout()
    fig.savefig(out_dir / PLOT)
    plt.close(fig)
    return PLOT
