"""``python -m bench.load.compare``: several runs of ``make bench-load`` side by side.

Each run is named on the command line (``before=DIR after=DIR ...``, each DIR holding
a ``load.json``); the first is the reference the others are compared with. Writes, in
``--out``: every run's ``load.json`` under its name (its command without its own
``--out``), ``capacity.md`` (turns per second,
API overhead and CPU per turn of each service, per transport and loops at once, with
ratios to the reference) and ``capacity.png`` (CPU per turn by service, and turns per
second against loops at once, one bar or line per run).
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

from bench.load.stats import SERVICES, cell_at, find
from bench.services.common import markdown_table

API_SERVICES = ("gateway", "safety", "tokenizer", "router", "billing")
MARKDOWN, PLOT = "capacity.md", "capacity.png"


def load_runs(named: list[str]) -> dict[str, dict[str, Any]]:
    runs = {}
    for item in named:
        name, sep, folder = item.partition("=")
        if not sep or not name or not folder:
            raise SystemExit(f"expected name=DIR, got {item!r}")
        run = json.loads((Path(folder) / "load.json").read_text())
        run["command"] = without_out(run["command"])
        runs[name] = run
    if len(runs) < 2:
        raise SystemExit("name two runs or more: the first is the reference")
    return runs


def without_out(command: str) -> str:
    """The run's command without where it wrote (a folder of that machine's)."""
    head, sep, quoted = command.partition(" BENCH_ARGS=")
    if not sep:
        return command
    words = shlex.split(shlex.split(quoted)[0])
    kept = [w for i, w in enumerate(words) if w != "--out" and (i == 0 or words[i - 1] != "--out")]
    return head + (f" BENCH_ARGS={shlex.quote(shlex.join(kept))}" if kept else "")


def api_cpu(cell: dict[str, Any]) -> float:
    """CPU per turn of the API services (all but the worker, the model's stand-in)."""
    return sum(cell["cpu_ms_per_turn"].get(s, 0.0) for s in API_SERVICES)


def _ratio(value: float | None, reference: float | None) -> str:
    if value is None or not reference:
        return "-"
    return f"{value / reference:.2f}x"


def cells_in_common(runs: dict[str, dict[str, Any]]) -> list[tuple[str, int]]:
    """(transport, loops) measured in every run, in the reference's order."""
    reference = next(iter(runs.values()))["cells"]
    keys = [(c["transport"], c["loops"]) for c in reference]
    return [k for k in keys if all(find(r["cells"], *k) for r in runs.values())]


def summary_rows(runs: dict[str, dict[str, Any]]) -> list[list[str]]:
    names = list(runs)
    rows = []
    for transport, loops in cells_in_common(runs):
        cells = {n: find(runs[n]["cells"], transport, loops) for n in names}
        ref = cells[names[0]]
        for name, cell in cells.items():
            assert cell is not None and ref is not None
            rows.append(
                [
                    transport,
                    str(loops),
                    name,
                    f"{cell['turns_per_s']:,.1f}",
                    f"{cell['overhead_ms']['p50']:,.1f}",
                    f"{cell['overhead_ms']['p90']:,.1f}",
                    str(cell["error_count"]),
                    f"{api_cpu(cell):.2f}",
                    f"{cell['cpu_ms_per_turn'].get('worker', 0.0):.2f}",
                    _ratio(api_cpu(cell), api_cpu(ref)),
                    _ratio(cell["overhead_ms"]["p50"], ref["overhead_ms"]["p50"]),
                ]
            )
    return rows


def service_rows(runs: dict[str, dict[str, Any]], transport: str) -> list[list[str]]:
    rows = []
    for t, loops in cells_in_common(runs):
        if t != transport:
            continue
        for name, run in runs.items():
            cell = find(run["cells"], t, loops)
            assert cell is not None
            per = cell["cpu_ms_per_turn"]
            rows.append(
                [str(loops), name]
                + [f"{per.get(s, 0.0):.2f}" for s in SERVICES]
                + [f"{api_cpu(cell):.2f}", f"{cell['client_cpu_ms_per_turn']:.2f}"]
            )
    return rows


def markdown(runs: dict[str, dict[str, Any]]) -> str:
    names = list(runs)
    lines = [
        "# Capacity: runs of `make bench-load` side by side",
        "",
        f"Reference: **{names[0]}**; ratios are each run's over it, at the same transport "
        "and loops at once. API CPU is the gateway, safety, tokenizer, router and billing "
        "together; the worker (the CPU simulator) is the model's stand-in.",
        "",
    ]
    for name, run in runs.items():
        note = f" ({run['note']})" if run.get("note") else ""
        lines.append(f"- **{name}**: {run['date']}, `{run['command']}`{note}")
    lines += ["", "## Throughput, overhead and CPU per turn", ""]
    headers = [
        "transport",
        "loops",
        "run",
        "turns/s",
        "overhead p50 ms",
        "p90",
        "errors",
        "API CPU ms/turn",
        "worker ms/turn",
        "API CPU vs ref",
        "p50 vs ref",
    ]
    lines += markdown_table(headers, summary_rows(runs), text_columns=3)
    for transport in dict.fromkeys(t for t, _ in cells_in_common(runs)):
        lines += ["", f"## Where a turn's CPU goes, {transport} (ms per turn)", ""]
        headers = ["loops", "run", *SERVICES, "API total", "client"]
        lines += markdown_table(headers, service_rows(runs, transport), text_columns=2)
    lines += ["", f"![capacity]({PLOT})", ""]
    return "\n".join(lines)


def write_plot(runs: dict[str, dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    common = cells_in_common(runs)
    ws = [k for k in common if k[0] == "websocket"] or common
    fig, (bars, rate) = plt.subplots(1, 2, figsize=(13, 5.5), dpi=100)
    width = 0.8 / len(runs)
    for i, (name, run) in enumerate(runs.items()):
        bottom = [0.0] * len(ws)
        xs = [j + i * width for j in range(len(ws))]
        for service in SERVICES:
            ys = [cell_at(run["cells"], *k)["cpu_ms_per_turn"].get(service, 0.0) for k in ws]
            bars.bar(
                xs,
                ys,
                width * 0.95,
                bottom=bottom,
                label=service if i == 0 else None,
                color=f"C{SERVICES.index(service)}",
                edgecolor="white",
                linewidth=0.3,
            )
            bottom = [b + y for b, y in zip(bottom, ys, strict=True)]
        for x, total in zip(xs, bottom, strict=True):
            bars.text(x, total, name, rotation=90, ha="center", va="bottom", fontsize=7)
        loops = sorted({c["loops"] for c in run["cells"] if c["transport"] == ws[0][0]})
        rates = [cell_at(run["cells"], ws[0][0], n)["turns_per_s"] for n in loops]
        rate.plot(loops, rates, "o-", ms=4, label=name)
    bars.set_xticks([j + width * (len(runs) - 1) / 2 for j in range(len(ws))])
    bars.set_xticklabels([f"{t}\n{n} loops" for t, n in ws], fontsize=8)
    bars.set_ylabel("CPU ms per turn")
    bars.set_title("Where a turn's CPU goes")
    bars.legend(fontsize=7, loc="upper right")
    rate.set_xlabel(f"agent loops at once ({ws[0][0]})")
    rate.set_ylabel("turns/s")
    rate.set_title("Throughput")
    rate.grid(alpha=0.3)
    rate.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / PLOT)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.load.compare", description=__doc__)
    parser.add_argument("runs", nargs="+", metavar="NAME=DIR", help="the reference first")
    parser.add_argument("--out", type=Path, required=True, help="folder for the comparison")
    args = parser.parse_args(argv)
    runs = load_runs(args.runs)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, run in runs.items():
        (args.out / f"{name}.json").write_text(json.dumps(run, indent=1))
    (args.out / MARKDOWN).write_text(markdown(runs))
    write_plot(runs, args.out)
    print(f"wrote {args.out / MARKDOWN} and {args.out / PLOT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
