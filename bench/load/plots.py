"""``load.png``: API overhead (p50, p90) and turns/s against loops at once, one line per
transport (and variant); below, CPU ms per turn of each service as stacked bars, per
transport and N (and variant). A run with repeats plots their medians."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.load.stats import SERVICES, cell_at, find, variants_of

PLOT = "load.png"
COLORS = {"websocket": "#2ca02c", "http": "#ff7f0e"}
SERVICE_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")


def write_plot(data: dict[str, Any], out_dir: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    cells = data.get("summary") or data["cells"]
    transports = [
        t for t in data["params"]["transports"] if any(c["transport"] == t for c in cells)
    ]
    variants = variants_of(cells)
    named = len(variants) > 1
    loops = sorted({c["loops"] for c in cells})
    fig = plt.figure(figsize=(11, 8.5), dpi=100)
    grid = fig.add_gridspec(2, 2, height_ratios=(1, 1.1))
    overhead, rate = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    cpu = fig.add_subplot(grid[1, :])
    lines = [(v, t) for v in variants for t in transports]
    palette = plt.get_cmap("tab10")
    for i, (variant, transport) in enumerate(lines):
        mine = sorted(
            (c for c in cells if c["transport"] == transport and c.get("variant", "") == variant),
            key=lambda c: c["loops"],
        )
        xs = [c["loops"] for c in mine]
        color = palette(i) if named else COLORS.get(transport)
        name = f"{variant} {transport}" if named else transport
        for q, style in (("p50", "o-"), ("p90", "s--")):
            ys = [c["overhead_ms"][q] for c in mine]
            overhead.plot(xs, ys, style, color=color, ms=4, label=f"{name} {q}")
        rate.plot(xs, [c["turns_per_s"] for c in mine], "o-", color=color, ms=4, label=name)
    for ax, title, ylabel in (
        (overhead, "API overhead per turn", "ms (turn time - model time)"),
        (rate, "Completed turns per second", "turns/s"),
    ):
        ax.set_xscale("log")
        ax.set_xticks(loops, [str(n) for n in loops])
        ax.minorticks_off()
        ax.set_xlabel("agent loops at once")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)

    bars = [(t, n, v) for n in loops for t in transports for v in variants if find(cells, t, n, v)]
    names = [
        f"{n}\n{'ws' if t == 'websocket' else t}" + (f"\n{v}" if named else "") for t, n, v in bars
    ]
    bottom = [0.0] * len(bars)
    for name, color in zip(SERVICES, SERVICE_COLORS, strict=True):
        heights = [cell_at(cells, t, n, v)["cpu_ms_per_turn"].get(name) or 0.0 for t, n, v in bars]
        cpu.bar(names, heights, bottom=bottom, color=color, label=name)
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    client = [cell_at(cells, t, n, v)["client_cpu_ms_per_turn"] for t, n, v in bars]
    cpu.bar(names, client, bottom=bottom, color="white", edgecolor="#555", hatch="//",
            label="client (this generator)")  # fmt: skip
    cpu.set_title("CPU per completed turn, by process (stacked)")
    cpu.set_xlabel("loops at once / transport" + (" / variant" if named else ""))
    cpu.set_ylabel("CPU ms per turn")
    cpu.grid(True, axis="y", alpha=0.3)
    cpu.legend(fontsize=8, ncol=4)
    fig.suptitle(
        f"{data['params']['model']}, {data['params']['turns']}-turn rollouts ({data['mode']} run)"
    )
    fig.tight_layout()
    fig.savefig(out_dir / PLOT)
    plt.close(fig)
    return PLOT
