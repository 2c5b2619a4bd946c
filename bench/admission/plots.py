"""The admission benchmarks' plots: ``fairness.png`` (A's overhead over time, B's answers
per second by status) and ``overload.png`` (latency of admitted and rejected requests
against one alone, and the capacity sweep)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

PHASE_COLORS = {"alone": "#2ca02c", "flood": "#d62728"}
STATUS_COLORS = {200: "#2ca02c", 429: "#ff7f0e", 503: "#9467bd", 0: "#000000"}
VARIANT_COLORS = {"off": "#d62728", "fixed": "#ff7f0e", "adaptive": "#1f77b4"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def rolling_median(points: list[list[float]], window_s: float) -> tuple[list[float], list[float]]:
    """The median of the values in each ``window_s`` bin, at the bin's middle."""
    bins: dict[int, list[float]] = defaultdict(list)
    for t, value in points:
        bins[math.floor(t / window_s)].append(value)
    xs, ys = [], []
    for b in sorted(bins):
        values = sorted(bins[b])
        xs.append((b + 0.5) * window_s)
        ys.append(values[len(values) // 2])
    return xs, ys


def per_second(series: list[list[Any]]) -> dict[int, dict[int, int]]:
    """Requests by status, per second of the run's clock they were sent in."""
    counts: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for at, status, _ in series:
        counts[status][math.floor(at)] += 1
    return counts


def fairness_plot(data: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 8), dpi=100, sharex=True)
    window = 1.0
    labelled: set[str] = set()
    for phase in data["phases"]:
        points = phase["series"]
        kind = phase["phase"]
        color = PHASE_COLORS.get(kind)
        name = "A alone" if kind == "alone" else "A while B floods"
        first = kind not in labelled
        labelled.add(kind)
        if points:
            top.scatter(*zip(*points, strict=True), s=4, alpha=0.25, color=color)
            xs, ys = rolling_median(points, window)
            label = f"{name}: median per {window:g} s" if first else None
            top.plot(xs, ys, "-", color=color, lw=2, label=label)
        p50 = data["pooled"][kind]["overhead_ms"]["p50"]
        if p50 is not None:
            end = phase["start_s"] + phase["wall_s"]
            label = f"{name}: p50 of all its phases, {p50:.1f} ms" if first else None
            top.hlines(p50, phase["start_s"], end, colors=color, linestyles="--", lw=1,
                       label=label)  # fmt: skip
    top.set_yscale("log")
    top.set_ylabel("API overhead per turn, ms (log)")
    top.set_title(f"Tenant A: {data['params']['loops']} agent loops over WebSocket, each turn")
    top.grid(True, alpha=0.3, which="both")
    top.legend(fontsize=8, loc="upper left")

    counts = per_second(data["flood"]["series"])
    seconds = sorted({s for by_second in counts.values() for s in by_second})
    base = [0] * len(seconds)
    for status in sorted(counts, key=lambda s: (s == 0, s)):
        heights = [counts[status].get(s, 0) for s in seconds]
        name = {0: "no answer (timeout)", 200: "200 (admitted)"}.get(status, str(status))
        bottom.bar([s + 0.5 for s in seconds], heights, width=0.9, bottom=base,
                   color=STATUS_COLORS.get(status, "#7f7f7f"), label=name)  # fmt: skip
        base = [b + h for b, h in zip(base, heights, strict=True)]
    limit = data["params"]["b_requests_per_minute"] / 60
    bottom.axhline(limit, color="#555", ls=":", lw=1, label=f"B's limit ({limit:g}/s)")
    bottom.set_ylabel("B's requests per second")
    bottom.set_xlabel("seconds into the run (by when each request was sent)")
    bottom.set_title("Tenant B's flood, answers by status")
    bottom.grid(True, axis="y", alpha=0.3)
    bottom.legend(fontsize=8, loc="upper left")
    for ax in (top, bottom):
        for phase in data["phases"]:
            if phase["phase"] == "flood":
                ax.axvspan(phase["start_s"], phase["start_s"] + phase["wall_s"],
                           color=PHASE_COLORS["flood"], alpha=0.05)  # fmt: skip
    fig.suptitle(f"Fairness on {data['params']['model']} ({data['mode']} run)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _cdf(ax, values: list[float], style: str, color: str, label: str) -> None:
    if values:
        ys = [(i + 1) / len(values) for i in range(len(values))]
        ax.step([v / 1000 for v in values], ys, style, color=color, where="post", label=label)


def overload_plot(data: dict[str, Any], path: Path) -> None:
    plt = _pyplot()
    fig, (times, sweep) = plt.subplots(1, 2, figsize=(13, 5.5), dpi=100)
    dashes = ["-", "--", ":", "-."]
    sizes = sorted({r["requests"] for r in data["runs"]})
    pooled: dict[tuple[int, str], dict[str, list[float]]] = {}
    for r in data["runs"]:  # a variant's bursts of one N together
        cell = pooled.setdefault((r["requests"], r["variant"]), {"admitted": [], "rejected": []})
        cell["admitted"] += r["admitted_series"]
        cell["rejected"] += r["rejected_series"]
    for (n, variant), cell in pooled.items():
        style = dashes[sizes.index(n) % len(dashes)]
        color = VARIANT_COLORS.get(variant, "#7f7f7f")
        name = f"{n} at once, {variant}"
        admitted, rejected = sorted(cell["admitted"]), sorted(cell["rejected"])
        _cdf(times, admitted, style, color, f"{name}: admitted ({len(admitted)})")
        if rejected:
            _cdf(times, rejected, style, "#9467bd" if variant == "fixed" else "#8c564b",
                 f"{name}: rejected ({len(rejected)})")  # fmt: skip
    alone = data["alone"]["adaptive"]["latency_ms"]["p50"]
    if alone:
        times.axvline(
            alone / 1000, color="#2ca02c", lw=1, label=f"one alone ({alone / 1000:.2f} s)"
        )
        times.axvline(2 * alone / 1000, color="#2ca02c", lw=1, ls=":", label="2x one alone")
    times.axvline(0.2, color="#555", lw=1, ls="--", label="200 ms")
    times.set_xscale("log")
    times.set_xlabel("seconds from connect to the last event or the error answer (log)")
    times.set_ylabel("share of the requests of that kind")
    times.set_title("Answer times: admitted streams and rejected requests")
    times.grid(True, alpha=0.3, which="both")
    times.legend(fontsize=7, loc="lower right")

    cells = data["sweep"]
    xs = [c["streams"] for c in cells]
    speed = data["params"]["model_tokens_per_s"]
    for kind, color in (("delivered", "#1f77b4"), ("decode", "#ff7f0e")):
        for q, style in (("p50", "o-"), ("p10", "s--")):
            ys = [c["tokens_per_s"][kind][q] for c in cells]
            name = "delivered (whole wait)" if kind == "delivered" else "decode pace"
            sweep.plot(xs, ys, style, color=color, ms=4, label=f"{name}, {q}")
    sweep.axhline(speed, color="#2ca02c", lw=1, label=f"model speed ({speed:,.0f} tokens/s)")
    for level, style in (("full_speed", "--"), ("latency_1.5x", "-."), ("latency_2x", ":")):
        if (n := data["capacity"].get(level)) is not None:
            sweep.axvline(n, color="#d62728", lw=1, ls=style, label=f"{level}: {n} streams")
    sweep.set_ylim(bottom=0)
    sweep.set_xlabel(f"streams of {data['params']['output_tokens']:,} tokens at once (no shedding)")
    sweep.set_ylabel("tokens/s a stream")
    sweep.set_title("Capacity: how many streams keep the model's pace")
    sweep.grid(True, alpha=0.3)
    sweep.legend(fontsize=8, loc="lower left")
    quota = data["params"].get("cpu_quota")
    where = f", each stack held to {quota:g} core(s)" if quota else ""
    fig.suptitle(f"Overload on {data['params']['model']} ({data['mode']} run{where})")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
