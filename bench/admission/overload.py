"""``python -m bench.admission.overload`` (``make bench-overload``): push well past capacity,
with overload shedding off and on, side by side in one run.

Two private stacks: one with shedding off (``TURNPIKE_MAX_IN_FLIGHT=0``), one with the
gateway's default (or ``--max-in-flight``). Every request asks ``turnpike-sim`` (1,000
tokens/s) for about 2,000 tokens: a prompt that asks for that many ("in 2000 tokens": the
simulator writes that long, ``src/turnpike/worker/pseudo_text.py``) and a ``max_output_tokens``
that does not cut it. First one request alone on each stack (the reference), then the
capacity sweep on the stack without shedding: N streams at once, and the tokens/s each
one gets against the model's speed (the figure the in-flight default comes from); then N
requests at once (300, 600) on each stack in turn. Every request over HTTP with SSE on a
connection of its own, waited for at most a bounded time (a hung request). Results in
``bench/results/overload.{json,md,png}``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench.admission import common
from bench.admission.common import COMPLETED, TIMEOUT, AnswerChannel, Shot, fmt, low, shoot
from bench.admission.plots import overload_plot
from bench.load.__main__ import positive_ints
from bench.load.driver import settled_usage
from bench.load.stats import dist
from bench.loop.stack import CpuMeter, Target
from bench.services.common import log, markdown_table

PLOT = "overload.png"
OFF, ON = "off", "on"
MAX_IN_FLIGHT = "TURNPIKE_MAX_IN_FLIGHT"
TARGET_LATENCY_RATIO = 2.0
TARGET_REJECT_MS = 1000.0


@dataclass(frozen=True)
class Plan:
    concurrency: tuple[int, ...] = (300, 600)
    sweep: tuple[int, ...] = (8, 16, 32, 48, 64, 96, 128, 192, 256)
    sweep_reps: int = 2  # bursts per N, their streams pooled
    output_tokens: int = 2000
    model: str = "turnpike-sim"
    model_tokens_per_s: float = 1000.0  # turnpike-sim's decode speed
    alone_runs: int = 3
    timeout_s: float = 120.0  # a request not answered by then has hung
    max_in_flight: int | None = None  # shedding on: the gateway's default unless given

    def body(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "input": f"Write about toll roads and the traffic on them in {self.output_tokens} tokens.",
            # A cap above the answer's length (the simulator ends within a sentence of
            # it), so every answer is complete.
            "max_output_tokens": self.output_tokens + 100,
        }

    def shedding_env(self) -> dict[str, str]:
        return {} if self.max_in_flight is None else {MAX_IN_FLIGHT: str(self.max_in_flight)}


FULL = Plan()
QUICK = Plan(
    concurrency=(12, 24), sweep=(2, 4), sweep_reps=1, output_tokens=200, alone_runs=1,
    timeout_s=30.0, max_in_flight=4,
)  # fmt: skip

OPTIONS: list[common.Option] = [
    ("--requests", "concurrency", positive_ints, "N at once (300,600)"),
    ("--sweep", "sweep", positive_ints, "streams at once, swept (8,16,...,256)"),
    ("--tokens", "output_tokens", int, "output tokens asked for (2000)"),
    ("--max-in-flight", "max_in_flight", int, "the shedding stack's bound (the gateway's default)"),
]


async def burst(target: Target, n: int, plan: Plan, label: str) -> tuple[list[Shot], dict]:
    """``n`` requests at once, each on a new connection; returns every answer, and the
    wall time and CPU (the stack's cores, this client's) the burst took."""
    shots: list[Shot] = []
    body = plan.body()
    origin = time.perf_counter()

    async def one() -> None:
        channel = AnswerChannel(target.base_url, target.api_key)
        try:
            shots.append(await shoot(channel, body, plan.timeout_s, origin))
        finally:
            await channel.close()

    def line() -> str:
        done = sum(s.outcome == COMPLETED for s in shots)
        return f"{len(shots)}/{n} answered, {done} completed"

    meter = CpuMeter(target.pids)
    meter.start()
    client_start = time.process_time()
    await common.with_progress(label, line, asyncio.gather(*(one() for _ in range(n))))
    wall = time.perf_counter() - origin
    cpu = meter.stop()
    return shots, {
        "wall_s": round(wall, 3),
        "gateway_cores": round(cpu.get("gateway", 0.0) / (wall * 1000), 3),
        "stack_cores": round(sum(cpu.values()) / (wall * 1000), 3),
        "client_cores": round((time.process_time() - client_start) / wall, 3),
    }


def rates(shots: list[Shot], kind: str) -> list[float]:
    """Each completed stream's ``decode`` or ``delivered`` tokens/s (see ``Shot``)."""
    values = (getattr(s, f"{kind}_tokens_per_s") for s in shots if s.outcome == COMPLETED)
    return [v for v in values if v is not None]


def pace(shots: list[Shot]) -> dict[str, dict[str, float | None]]:
    """The per-stream rates at p50 and p10 (the slow tenth)."""
    return {
        kind: {"p50": low(values, 50), "p10": low(values, 10)}
        for kind in ("delivered", "decode")
        for values in [rates(shots, kind)]
    }


def run_record(
    variant: str, n: int, shots: list[Shot], cost: dict, alone_ms: float | None
) -> dict[str, Any]:
    """One burst: admitted (completed), rejected (answered with an error status), hung
    (no answer within the timeout) and anything else, with their times."""
    done = [s for s in shots if s.outcome == COMPLETED]
    rejected = [s for s in shots if s.status >= 400]
    hung = [s for s in shots if s.outcome == TIMEOUT]
    latency = dist([s.latency_ms for s in done])
    return {
        "variant": variant,
        "requests": n,
        "answered": len(shots) - len(hung),
        "admitted": len(done),
        "rejected": len(rejected),
        "hung": len(hung),
        "other": len(shots) - len(done) - len(rejected) - len(hung),
        "by_outcome": common.by_outcome(shots),
        "admitted_ms": latency,
        "admitted_p50_vs_alone": common.ratio(latency["p50"], alone_ms),
        "ttft_ms": dist([s.ttft_ms for s in done if s.ttft_ms is not None]),
        "tokens_per_s": pace(done),
        "output_tokens_mean": round(statistics.fmean(s.output_tokens for s in done), 1)
        if done
        else None,
        "rejected_ms": dist([s.latency_ms for s in rejected]),
        "rejected_with_retry_after": sum(s.retry_after is not None for s in rejected),
        **cost,
        # For the plot: every admitted and every rejected request's time, ms.
        "admitted_series": sorted(round(s.latency_ms, 1) for s in done),
        "rejected_series": sorted(round(s.latency_ms, 1) for s in rejected),
    }


def run_line(r: dict[str, Any]) -> str:
    a, j = r["admitted_ms"], r["rejected_ms"]
    return (
        f"{r['admitted']} admitted (p50/p90/p99 {fmt(a['p50'], 0)}/{fmt(a['p90'], 0)}/"
        f"{fmt(a['p99'], 0)} ms, p50 {fmt(r['admitted_p50_vs_alone'], 2)}x alone), "
        f"{r['rejected']} rejected (p50/p99 {fmt(j['p50'], 0)}/{fmt(j['p99'], 0)} ms), "
        f"{r['hung']} hung, {r['other']} other"
    )


async def alone(target: Target, plan: Plan, variant: str) -> dict[str, Any]:
    """One request at a time, ``alone_runs`` times: the reference."""
    shots: list[Shot] = []
    for i in range(plan.alone_runs):
        batch, _ = await burst(target, 1, plan, f"{variant}, alone #{i + 1}")
        shots += batch
    done = [s for s in shots if s.outcome == COMPLETED]
    record: dict[str, Any] = {
        "variant": variant,
        "runs": len(shots),
        "completed": len(done),
        "latency_ms": dist([s.latency_ms for s in done]),
        "ttft_ms": dist([s.ttft_ms for s in done if s.ttft_ms is not None]),
        "tokens_per_s": pace(done),
        "output_tokens_mean": round(statistics.fmean(s.output_tokens for s in done), 1)
        if done
        else None,
        "errors": {k: v["count"] for k, v in common.by_outcome(shots).items() if k != COMPLETED},
    }
    log(
        f"  one alone on the stack with shedding {variant}: {fmt(record['latency_ms']['p50'], 0)}"
        f" ms (median of {len(done)}), {fmt(record['tokens_per_s']['delivered']['p50'], 0)} "
        "tokens/s delivered, "
        f"{fmt(record['output_tokens_mean'], 0)} tokens"
    )
    return record


def sweep_record(
    n: int, shots: list[Shot], cost: dict, reference: dict[str, Any], reps: int
) -> dict[str, Any]:
    """``reps`` bursts of ``n`` streams at once, their streams pooled."""
    done = [s for s in shots if s.outcome == COMPLETED]
    latency = dist([s.latency_ms for s in done])
    rate = pace(done)
    alone = reference["tokens_per_s"]["delivered"]["p50"]
    return {
        "streams": n,
        "bursts": reps,
        "completed": len(done),
        "errors": len(shots) - len(done),
        "tokens_per_s": rate,
        "delivered_p50_vs_alone": common.ratio(rate["delivered"]["p50"], alone),
        "total_tokens_per_s": round(sum(s.output_tokens for s in done) / cost["wall_s"], 1),
        "latency_ms": latency,
        "latency_p50_vs_alone": common.ratio(latency["p50"], reference["latency_ms"]["p50"]),
        "ttft_ms": dist([s.ttft_ms for s in done if s.ttft_ms is not None]),
        **cost,
    }


# What "at full speed" may mean, strictest first: the most streams at once whose median
# stream is delivered at 90% of one alone's rate, or whose median latency stays within
# 1.5x (2x) of one alone's.
CAPACITY_LEVELS = {
    "full_speed": ("delivered_p50_vs_alone", 0.9, ">="),
    "latency_1.5x": ("latency_p50_vs_alone", 1.5, "<="),
    "latency_2x": ("latency_p50_vs_alone", 2.0, "<="),
}


def capacity(sweep: list[dict[str, Any]]) -> dict[str, int | None]:
    """Per level, the most streams at once that met it, with no error, below the first N
    that did not (None: not even the smallest N)."""
    found: dict[str, int | None] = {}
    for level, (key, bound, sense) in CAPACITY_LEVELS.items():
        best = None
        for cell in sorted(sweep, key=lambda c: c["streams"]):
            value = cell[key]
            ok = value is not None and (value >= bound if sense == ">=" else value <= bound)
            if cell["errors"] or not ok:
                break
            best = cell["streams"]
        found[level] = best
    return found


def merge_costs(costs: list[dict[str, float]]) -> dict[str, float]:
    """Bursts one after another: their wall times add up, their cores average by time."""
    wall = sum(c["wall_s"] for c in costs)
    merged = {"wall_s": round(wall, 3)}
    for key in ("gateway_cores", "stack_cores", "client_cores"):
        merged[key] = round(sum(c[key] * c["wall_s"] for c in costs) / wall, 3)
    return merged


async def measure(stacks: dict[str, Target], plan: Plan) -> dict[str, Any]:
    log(f"one request alone, {plan.alone_runs} time(s) on each stack (the reference)")
    references = {v: await alone(t, plan, v) for v, t in stacks.items()}
    base = {v: r["latency_ms"]["p50"] for v, r in references.items()}

    log(
        f"capacity sweep on the stack without shedding: {', '.join(map(str, plan.sweep))} streams at once"
    )
    sweep = []
    for n in plan.sweep:
        shots, costs = [], []
        for rep in range(plan.sweep_reps):
            batch, cost = await burst(stacks[OFF], n, plan, f"sweep, {n} streams #{rep + 1}")
            shots += batch
            costs.append(cost)
            await settled_usage(stacks[OFF])
        cell = sweep_record(n, shots, merge_costs(costs), references[OFF], plan.sweep_reps)
        sweep.append(cell)
        d, c = cell["tokens_per_s"]["delivered"], cell["tokens_per_s"]["decode"]
        log(
            f"  {n} streams: delivered p50 {fmt(d['p50'], 0)}, p10 {fmt(d['p10'], 0)} tokens/s a "
            f"stream (decode pace p10 {fmt(c['p10'], 0)}); {fmt(cell['total_tokens_per_s'], 0)} "
            f"tokens/s in all; latency p50 {fmt(cell['latency_p50_vs_alone'], 2)}x alone, TTFT "
            f"p50 {fmt(cell['ttft_ms']['p50'], 0)} ms; {cell['errors']} errors"
        )

    runs = []
    for n in plan.concurrency:
        for variant, target in stacks.items():
            log(f"{n} requests at once, shedding {variant}")
            shots, cost = await burst(target, n, plan, f"{n} at once, shedding {variant}")
            runs.append(run_record(variant, n, shots, cost, base[variant]))
            log(f"  {run_line(runs[-1])}")
            await settled_usage(target)
    return {
        "alone": references,
        "sweep": sweep,
        "capacity": capacity(sweep),
        "runs": runs,
    }


def targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for r in data["runs"]:
        n = r["requests"]
        if r["variant"] == ON:
            ratio = r["admitted_p50_vs_alone"]
            out.append(
                {
                    "name": f"{n} at once, shedding on: admitted p50 vs one alone",
                    "goal": f"within {TARGET_LATENCY_RATIO:g}x",
                    "measured": ratio,
                    "pass": None if ratio is None else ratio <= TARGET_LATENCY_RATIO,
                    "detail": f"{fmt(r['admitted_ms']['p50'], 0)} ms vs "
                    f"{fmt(data['alone'][ON]['latency_ms']['p50'], 0)} ms; {r['admitted']} "
                    f"admitted",
                }
            )
            p99 = r["rejected_ms"]["p99"]
            out.append(
                {
                    "name": f"{n} at once, shedding on: rejected answered within",
                    "goal": f"< {TARGET_REJECT_MS:,.0f} ms",
                    "measured": p99,
                    "pass": None if p99 is None else p99 < TARGET_REJECT_MS,
                    "detail": f"p99 {fmt(p99, 0)} ms, p50 {fmt(r['rejected_ms']['p50'], 0)} ms; "
                    f"{r['rejected']} rejected ({outcomes_text(r, rejected=True)})",
                }
            )
        out.append(
            {
                "name": f"{n} at once, shedding {r['variant']}: hung requests",
                "goal": "0",
                "measured": r["hung"],
                "pass": r["hung"] == 0,
                "detail": f"none of {n} unanswered after {data['params']['timeout_s']:g} s"
                if not r["hung"]
                else f"{r['hung']} of {n} unanswered after {data['params']['timeout_s']:g} s",
            }
        )
    return out


def shedding_text(plan: Plan, runs: list[dict[str, Any]]) -> str:
    """How the shedding stack was set, and the most it admitted from one burst."""
    most = max((r["admitted"] for r in runs if r["variant"] == ON), default=None)
    seen = f"; at most {most} admitted from one burst" if most is not None else ""
    if plan.max_in_flight is None:
        return f"the gateway's default bound{seen}"
    return f"`{MAX_IN_FLIGHT}={plan.max_in_flight}`{seen}"


def outcomes_text(r: dict[str, Any], rejected: bool = False) -> str:
    kinds = [
        f"{k} x{v['count']}"
        for k, v in r["by_outcome"].items()
        if not rejected or v["status"] >= 400
    ]
    return ", ".join(kinds) or "none"


# -- the report --------------------------------------------------------------------------


def markdown(data: dict[str, Any]) -> str:
    p = data["params"]
    shed = data["shedding_on"]
    intro = (
        f"Two private stacks, started side by side: shedding **off** (`{MAX_IN_FLIGHT}=0`) "
        f"and **on** ({shed}). Every request asks `{p['model']}` "
        f"({p['model_tokens_per_s']:,.0f} tokens/s) for about {p['output_tokens']:,} tokens "
        f'("... in {p["output_tokens"]} tokens", `max_output_tokens` '
        f"{p['output_tokens'] + 100:,}), streamed over HTTP with SSE, each on a connection of "
        f"its own, all sent at once, each waited for at most {p['timeout_s']:g} s (past that, "
        "hung). Latency = from the connect to the terminal event (or to the error answer); "
        "delivered tokens/s a stream = output tokens over that latency; "
        "percentiles nearest-rank. The load generator runs on the same machine as both "
        "stacks; its own CPU is in the tables (client cores)."
    )
    lines = common.report_head(data, intro)
    lines += ["", "## One request alone (the reference)", ""]
    rows = [
        [
            v,
            f"{r['completed']}/{r['runs']}",
            fmt(r["latency_ms"]["p50"], 0),
            fmt(r["ttft_ms"]["p50"], 0),
            fmt(r["tokens_per_s"]["delivered"]["p50"], 0),
            fmt(r["tokens_per_s"]["decode"]["p50"], 0),
            fmt(r["output_tokens_mean"], 0),
        ]
        for v, r in data["alone"].items()
    ]
    lines += markdown_table(
        [
            "shedding",
            "completed",
            "latency ms (median)",
            "TTFT ms",
            "tokens/s delivered",
            "decode pace",
            "output tokens",
        ],
        rows,
        1,
    )
    lines += ["", "## N requests at once", ""]
    rows = []
    for r in data["runs"]:
        a, j = r["admitted_ms"], r["rejected_ms"]
        rows.append(
            [
                r["variant"],
                f"{r['requests']:,}",
                f"{r['admitted']:,}",
                f"{r['rejected']:,}",
                str(r["hung"]),
                str(r["other"]),
                f"{fmt(a['p50'], 0)} / {fmt(a['p90'], 0)} / {fmt(a['p99'], 0)}",
                common_x(r["admitted_p50_vs_alone"]),
                fmt(r["ttft_ms"]["p50"], 0),
                fmt(r["tokens_per_s"]["delivered"]["p50"], 0),
                f"{fmt(j['p50'], 0)} / {fmt(j['p99'], 0)}",
                fmt(r["wall_s"]),
                fmt(r["gateway_cores"], 2),
                fmt(r["stack_cores"], 2),
                fmt(r["client_cores"], 2),
            ]
        )
    lines += markdown_table(
        [
            "shedding",
            "requests",
            "admitted",
            "rejected",
            "hung",
            "other",
            "admitted p50 / p90 / p99 ms",
            "p50 vs alone",
            "TTFT p50 ms",
            "delivered tokens/s a stream, p50",
            "rejected p50 / p99 ms",
            "wall s",
            "gateway cores",
            "stack cores",
            "client cores",
        ],
        rows,
        1,
    )
    answers = []
    for r in data["runs"]:
        for kind, v in r["by_outcome"].items():
            status, count, told = str(v["status"] or "-"), f"{v['count']:,}", v["with_retry_after"]
            answers.append([r["variant"], f"{r['requests']:,}", kind, status, count, f"{told:,}"])
    lines += ["", "Answers by kind:", ""]
    lines += markdown_table(
        ["shedding", "requests", "answer", "status", "count", "with retry-after"], answers, 3
    )
    lines += ["", "## Capacity: concurrent streams paced at full speed", ""]
    lines += [
        f"N streams of {p['output_tokens']:,} tokens sent at once to the stack without "
        f"shedding, {p['sweep_reps']} burst(s) per N (their streams pooled). Per stream: "
        "tokens/s **delivered** (output tokens over the whole wait, connect to last event: "
        "what a client gets; one alone gets "
        f"{fmt(data['alone'][OFF]['tokens_per_s']['delivered']['p50'], 0)}, its time to first "
        "token included) at p50 and p10 (the slow tenth), and the **decode pace** (from the "
        "first delta on: the simulator's schedule is absolute from its first token, so a "
        "stream that started late catches up there and its lateness shows in the time to "
        "first token); what the stack delivered in all; latency against one alone.",
        "",
    ]
    rows = [
        [
            str(c["streams"]),
            f"{c['completed']}",
            fmt(c["tokens_per_s"]["delivered"]["p50"], 0),
            fmt(c["tokens_per_s"]["delivered"]["p10"], 0),
            common_x(c["delivered_p50_vs_alone"]),
            fmt(c["tokens_per_s"]["decode"]["p10"], 0),
            fmt(c["total_tokens_per_s"], 0),
            fmt(c["latency_ms"]["p50"], 0),
            common_x(c["latency_p50_vs_alone"]),
            f"{fmt(c['ttft_ms']['p50'], 0)} / {fmt(c['ttft_ms']['p90'], 0)}",
            fmt(c["gateway_cores"], 2),
            fmt(c["stack_cores"], 2),
            fmt(c["client_cores"], 2),
        ]
        for c in data["sweep"]
    ]
    lines += markdown_table(
        [
            "streams",
            "completed",
            "delivered tokens/s a stream, p50",
            "p10",
            "p50 vs alone",
            "decode pace p10",
            "tokens/s in all",
            "latency p50 ms",
            "vs alone",
            "TTFT p50 / p90 ms",
            "gateway cores",
            "stack cores",
            "client cores",
        ],
        rows,
        1,
    )
    cap = data["capacity"]

    def most(level: str) -> str:
        n = cap.get(level)
        return f"**{n}**" if n is not None else "fewer than the smallest N swept"

    lines += [
        "",
        "Streams at once the stack carries here (the most N, counted up from the smallest, "
        "with no error and):",
        "",
        f"- at full speed, the median stream delivered at 90% of one alone's rate or "
        f"better: {most('full_speed')};",
        f"- median latency within 1.5x of one alone: {most('latency_1.5x')};",
        f"- median latency within 2x of one alone (the shedding target's own bound): "
        f"{most('latency_2x')}.",
        "",
        "All N of a burst arrive in the same instant, the worst case for an in-flight bound "
        "of N: what grows with N is the time to first token (every request's admission "
        "work at once), not the pace of a stream once it runs.",
        "",
        "## Plot",
        "",
        f"![{PLOT}]({PLOT})",
    ]
    return "\n".join(lines) + "\n"


def common_x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = common.parser(
        "python -m bench.admission.overload",
        "N requests of ~2,000 tokens at once against a stack with shedding off and one with "
        "it on, one request alone as the reference, and the capacity sweep.",
        "12 and 24 requests of 200 tokens, shedding at 4 in flight, a sweep of 2 and 4",
    )
    args, plan = common.parse_plan(parser, argv, OPTIONS, FULL, QUICK)
    run = common.Run(argv, "bench-overload", args.quick, args.note)
    stacks: dict[str, Target] = {}
    try:
        stacks[OFF] = common.start_stack({MAX_IN_FLIGHT: "0"}, "shedding off")
        stacks[ON] = common.start_stack(plan.shedding_env(), "shedding on")
        import uvloop

        results = uvloop.run(measure(stacks, plan))
    finally:
        for target in stacks.values():
            target.stop()
    data = run.header("Overload: shedding off and on")
    data |= {
        "stacks": {v: t.description for v, t in stacks.items()},
        "shedding_on": shedding_text(plan, results["runs"]),
        "params": asdict(plan),
        **results,
    }
    data["targets"] = targets(data)
    common.write_results(data, args.out.resolve(), "overload", markdown, overload_plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
