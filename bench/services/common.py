"""What every service benchmark shares: progress lines, timing, statistics, the processes
under test (started with devstack's ``LocalStack``), output files and plots."""

from __future__ import annotations

import datetime
import inspect
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from turnpike.devstack import LocalStack, StackConfig, default_services

_STARTED = time.monotonic()
K = TypeVar("K")


def log(message: str) -> None:
    """One progress line, with the seconds since the run started."""
    print(f"[{time.monotonic() - _STARTED:6.1f}s] {message}", flush=True)


# -- statistics ----------------------------------------------------------------------


def percentile(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: with few samples it is a real sample)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(samples: Sequence[float], scale: float = 1.0, digits: int = 4) -> dict[str, Any]:
    """Median, p90, min and count of ``samples`` times ``scale`` (1000: seconds -> ms)."""
    if not samples:
        raise ValueError("no samples")
    values = [s * scale for s in samples]
    return {
        "median": round(statistics.median(values), digits),
        "p90": round(percentile(values, 90), digits),
        "min": round(min(values), digits),
        "n": len(values),
    }


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares (slope, intercept)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
    return slope, my - slope * mx


# -- timing ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """How long to repeat one measurement point: at least ``min_n`` samples, then until
    ``seconds`` have been spent on it or ``max_n`` samples taken."""

    min_n: int
    max_n: int
    seconds: float


async def sample(
    # `...`: callers bind a call's arguments as lambda defaults, which `[]` would refuse.
    calls: Mapping[K, Callable[..., object]],
    budget: Budget,
    warmup: int = 1,
) -> dict[K, list[float]]:
    """Wall-clock seconds of repeated calls, taken round-robin (one sample of each call per
    round), so a burst of load from elsewhere on the machine hits every call alike and their
    comparison stays fair. A call may be a plain function or return an awaitable."""

    async def once(call: Callable[[], object]) -> float:
        start = time.perf_counter()
        result = call()
        if inspect.isawaitable(result):
            await result
        return time.perf_counter() - start

    for _ in range(warmup):
        for call in calls.values():
            await once(call)
    samples: dict[K, list[float]] = {key: [] for key in calls}
    spent, rounds = 0.0, 0
    while rounds < budget.max_n and (rounds < budget.min_n or spent < budget.seconds * len(calls)):
        for key, call in calls.items():
            samples[key].append(await once(call))
            spent += samples[key][-1]
        rounds += 1
    return samples


# -- the run ---------------------------------------------------------------------------


@dataclass
class Context:
    quick: bool
    out_dir: Path
    addresses: dict[str, str]  # process name (devstack's) -> host:port
    budget: Budget

    def pick(self, full: Any, quick: Any) -> Any:
        return quick if self.quick else full


def machine_info() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(terse=True),
        "machine": platform.machine(),
        # Other work on the machine skews timings: the 1, 5 and 15 minute load averages.
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def start_services(names: Iterable[str], state_dir: Path) -> tuple[LocalStack, dict[str, str]]:
    """Start devstack's processes ``names`` (e.g. "tokenizer", "worker-1") as a private
    stack (``StackConfig.private``) keeping its state in ``state_dir``. Returns the
    started stack and each process's address."""
    wanted = set(names)
    config = StackConfig.private(state_dir, startup_timeout_s=60.0)
    specs = [spec for spec in default_services(config) if spec.name in wanted]
    if missing := wanted - {spec.name for spec in specs}:
        raise ValueError(f"devstack has no process named {sorted(missing)}")
    stack = LocalStack(config, services=specs, python=sys.executable)
    stack.start()
    return stack, {spec.name: config.address(spec.port) for spec in specs}


# -- results ---------------------------------------------------------------------------


def markdown_table(headers: list[str], rows: list[list[Any]], text_columns: int = 0) -> list[str]:
    """A Markdown table: the first ``text_columns`` aligned left, the numbers after them
    right."""
    align = (" --- " if i < text_columns else " ---: " for i in range(len(headers)))
    return [
        "| " + " | ".join(headers) + " |",
        "|" + "|".join(align) + "|",
        *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rows),
    ]


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]]
    note: str = ""
    text_columns: int = 1  # leading columns aligned left; the numbers after them right

    def markdown(self) -> str:
        lines = [f"**{self.title}**", ""]
        lines += markdown_table(self.columns, self.rows, self.text_columns)
        if self.note:
            lines += ["", self.note]
        return "\n".join(lines)


@dataclass
class Report:
    service: str
    title: str
    summary: str  # one paragraph: what is measured and how
    params: dict[str, Any]
    measurements: list[dict[str, Any]]
    derived: dict[str, Any]
    headline: list[str] = field(default_factory=list)  # the findings, one sentence each
    tables: list[Table] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)  # file names beside the report
    duration_s: float = 0.0


def ms(summary: dict[str, Any], digits: int = 2) -> str:
    """A latency summary as 'median (p90)'."""
    return f"{summary['median']:.{digits}f} ({summary['p90']:.{digits}f})"


def rate(value: float) -> str:
    """A throughput, readable at any size."""
    if value >= 1e6:
        return f"{value / 1e6:.2f} M"
    if value >= 1e4:
        return f"{value / 1e3:.0f} k"
    return f"{value:,.0f}"


def write_report(report: Report, out_dir: Path, quick: bool) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    machine = machine_info()
    data = {
        "service": report.service,
        "title": report.title,
        "date": date,
        "mode": "quick" if quick else "full",
        "duration_s": round(report.duration_s, 2),
        "machine": machine,
        "params": report.params,
        "measurements": report.measurements,
        "derived": report.derived,
        "headline": report.headline,
        "plots": report.plots,
    }
    (out_dir / f"{report.service}.json").write_text(json.dumps(data, indent=2) + "\n")
    parts = [f"# {report.title}", "", report.summary, ""]
    parts += [f"- {line}" for line in report.headline] + [""]
    parts += [table.markdown() + "\n" for table in report.tables]
    parts += [f"![{name}]({name})\n" for name in report.plots]
    parts.append("<details><summary>Derived numbers</summary>\n")
    parts += [f"- {key}: {_plain(value)}" for key, value in report.derived.items()]
    parts.append("\n</details>")
    parts += [
        "",
        f"_{data['mode']} run, {date}, {machine['cpu_count']} CPUs, "
        f"{machine['implementation']} {machine['python']}, load average "
        f"{machine['load_average'][1]:g} (5 min), {report.duration_s:.1f} s. "
        f"Medians with p90 in parentheses; raw summaries in `{report.service}.json`._",
        "",
    ]
    (out_dir / f"{report.service}.md").write_text("\n".join(parts))


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def write_readme(out_dir: Path, order: Sequence[str]) -> Path:
    """Every ``<service>.md`` in ``out_dir``, one level down, under one heading."""
    parts = [
        "# Service benchmarks",
        "",
        "Each backend service's own work, measured in-process (the pure module) and over gRPC "
        "against the service running as its own process on loopback. Produced by "
        "`make bench-services` (`python -m bench.services`; `--quick` for a smoke run). "
        "Client and server share the machine's CPUs, as they do in `make run`.",
        "",
    ]
    for service in order:
        path = out_dir / f"{service}.md"
        if path.exists():
            text = path.read_text()
            parts.append(
                "\n".join(
                    "#" + line if line.startswith("#") else line for line in text.splitlines()
                )
            )
            parts.append("")
    readme = out_dir / "README.md"
    readme.write_text("\n".join(parts))
    return readme


@dataclass(frozen=True)
class Series:
    label: str
    x: Sequence[float]
    y: Sequence[float]
    style: str = "o-"


def line_plot(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    series: Sequence[Series],
    *,
    logx: bool = False,
    logy: bool = False,
) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for s in series:
        ax.plot(s.x, s.y, s.style, label=s.label, markersize=4)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def pick(measurements: list[dict], operation: str, transport: str) -> list[dict]:
    """The measurements of one operation over one transport, in the order they were taken."""
    return [m for m in measurements if m["operation"] == operation and m["transport"] == transport]


def history_fit(points: list[dict]) -> tuple[float, float]:
    """Median latency against history, fitted: (ms per 1k history tokens, fixed ms)."""
    slope, intercept = linear_fit(
        [m["history_tokens"] for m in points], [m["latency_ms"]["median"] for m in points]
    )
    return round(slope * 1000, 3), round(intercept, 3)


def cells_at(measurements: list[dict], turns: int) -> dict[tuple[str, str], dict]:
    """Every measurement at one history size, by (operation, transport)."""
    return {(m["operation"], m["transport"]): m for m in measurements if m["turns"] == turns}


def latency_series(measurements: list[dict], specs: Sequence[tuple[str, str, str]]) -> list[Series]:
    """One median-latency-against-history line per (operation, transport, style)."""
    return [
        Series(
            f"{op} {tr.replace('grpc', 'gRPC')}",
            [m["history_tokens"] for m in pick(measurements, op, tr)],
            [m["latency_ms"]["median"] for m in pick(measurements, op, tr)],
            style,
        )
        for op, tr, style in specs
    ]
