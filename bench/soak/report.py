"""The soak's outputs: ``soak.json`` (every sample), ``soak.md`` (the verdict per service,
pure text from the data) and ``soak.png`` (memory of every service over time)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.services.common import markdown_table

DEFAULT_OUT = Path(__file__).resolve().parents[1] / "results"
JSON, MARKDOWN, PLOT = "soak.json", "soak.md", "soak.png"


def trend_rows(data: dict[str, Any]) -> list[list[str]]:
    return [
        [
            t["service"],
            f"{t['start_mib']:,.1f}",
            f"{t['end_mib']:,.1f}",
            f"{t['growth_mib']:+,.1f}",
            f"{t['peak_mib']:,.1f}",
            f"{t['slope_mib_per_h']:+,.1f}",
            "flat" if t["flat"] else "**growing**",
        ]
        for t in data["trends"]
    ]


def markdown(data: dict[str, Any]) -> str:
    p = data["params"]
    lines = [
        f"# {data['title']}",
        "",
        f"{data['date']}; `{data['command']}`; {data['stack']}.",
        f"Machine: {data['machine']['cpu_count']} CPUs, Python {data['machine']['python']}."
        + (f" {data['note']}" if data.get("note") else ""),
        "",
        f"{p['loops']} agent loops (half over WebSocket, half over HTTP/SSE), {p['turns']}-turn "
        f"rollouts with fresh conversations, paced at {p['rate_per_s']:g} turns/s for "
        f"{p['duration_s']:.0f} s; anonymous resident memory (RssAnon: the heap, where a leak "
        f"shows) of every service every "
        f"{p['interval_s']:g} s. The first {p['warmup_s']:.0f} s are warm-up: the stores and "
        "caches fill. After it, a service is flat when the median of the last fifth of its "
        "samples is within 10% (at least 8 MiB) of the median of the first fifth.",
        "",
    ]
    if p["bounds"]:
        bounds = ", ".join(f"`{k}={v}`" for k, v in p["bounds"].items())
        lines += [f"Bounds set small for the run, so that eviction is exercised: {bounds}.", ""]
    lines += markdown_table(
        [
            "service",
            "after warm-up MiB",
            "end MiB",
            "growth MiB",
            "peak MiB",
            "slope MiB/h",
            "verdict",
        ],
        trend_rows(data),
        text_columns=1,
    )
    lines += ["", "| transport | turns ok/sent | errors | dropped |", "|---|---:|---:|---:|"]
    for name, t in data["transports"].items():
        errors = sum(t["errors"].values())
        detail = f" ({', '.join(f'{k}: {v}' for k, v in t['errors'].items())})" if errors else ""
        lines.append(
            f"| {name} | {t['turns_ok']:,}/{t['turns_sent']:,} | {errors}{detail} | {t['dropped']} |"
        )
    lines += ["", f"Billing events still pending at the end: {data['billing_pending_after']}.", ""]
    lines += [f"![memory of every service over time]({PLOT})", ""]
    return "\n".join(lines)


def write_plot(data: dict[str, Any], out_dir: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    samples = data["samples"]
    services = sorted({s for row in samples for s in row["rss_mib"]})
    fig, ax = plt.subplots(figsize=(11, 6), dpi=100)
    for service in services:
        points = [(r["t"] / 60, r["rss_mib"][service]) for r in samples if service in r["rss_mib"]]
        ax.plot([x for x, _ in points], [y for _, y in points], label=service, lw=1.4)
    ax.axvspan(0, data["params"]["warmup_s"] / 60, color="#999", alpha=0.15, label="warm-up")
    ax.set_xlabel("minutes")
    ax.set_ylabel("anonymous resident memory (RssAnon), MiB")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=3, loc="lower right")
    p = data["params"]
    length = f"{p['duration_s'] / 60:g} min" if p["duration_s"] >= 120 else f"{p['duration_s']:g} s"
    ax.set_title(
        f"Memory of every service: {p['rate_per_s']:g} turns/s for {length} "
        f"({p['loops']} agent loops)"
    )
    fig.tight_layout()
    fig.savefig(out_dir / PLOT)
    plt.close(fig)


def write(data: dict[str, Any], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / JSON).write_text(json.dumps(data, indent=1) + "\n")
    (out_dir / MARKDOWN).write_text(markdown(data))
    write_plot(data, out_dir)
    return [out_dir / JSON, out_dir / MARKDOWN, out_dir / PLOT]
