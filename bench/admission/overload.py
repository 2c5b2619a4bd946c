"""``python -m bench.admission.overload`` (``make bench-overload``): push well past capacity,
with overload shedding off, at a fixed bound and at the adaptive bound, side by side in
one run.

Three private stacks: shedding off (``TURNPIKE_MAX_IN_FLIGHT=0``), a fixed bound
(``TURNPIKE_ADAPTIVE_ADMISSION=false``, ``TURNPIKE_MAX_IN_FLIGHT`` 64 or ``--max-in-flight``)
and the gateway's default, the adaptive bound. Every request asks ``turnpike-sim`` (1,000
tokens/s) for about 2,000 tokens: a prompt that asks for that many ("in 2000 tokens": the
simulator writes that long, ``src/turnpike/worker/pseudo_text.py``) and a ``max_output_tokens``
that does not cut it. First one request alone on each stack (the reference), then the
capacity sweep on the stack without shedding: N streams at once, and the tokens/s each
one gets against the model's speed; then bursts of N requests at once (300, 600), each N
``--bursts`` times (3), the stacks in turn within each round, so the adaptive bound can
be seen to settle. Every request over HTTP with SSE on a connection of its own, waited for
at most a bounded time (a hung request). ``--cpu-quota CORES`` holds each stack's
processes to that many cores (``bench.admission.cpu_quota``; the load generator stays
outside). Results in ``bench/results/overload.{json,md,png}``, or
``overload-half-cpu.*`` under a quota of half the machine's cores.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from bench.admission import common
from bench.admission.common import COMPLETED, TIMEOUT, AnswerChannel, Shot, fmt, low, shoot
from bench.admission.cpu_quota import CpuQuota, QuotaUnavailable
from bench.admission.plots import overload_plot
from bench.load.__main__ import positive_ints
from bench.load.driver import settled_usage
from bench.load.stats import dist
from bench.loop.stack import CpuMeter, Target
from bench.services.common import log, markdown_table

OFF, FIXED, ADAPTIVE = "off", "fixed", "adaptive"
SHEDDING = (FIXED, ADAPTIVE)
MAX_IN_FLIGHT = "TURNPIKE_MAX_IN_FLIGHT"
ADAPTIVE_ADMISSION = "TURNPIKE_ADAPTIVE_ADMISSION"
TARGET_LATENCY_RATIO = 2.0
TARGET_REJECT_P50_MS = 200.0


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
    bursts: int = 3  # of each N on each stack
    max_in_flight: int = 64  # the fixed stack's bound
    # The adaptive stack's settings beyond the gateway's defaults (the quick run's small N).
    adaptive_env: tuple[tuple[str, str], ...] = ()
    cpu_quota: float | None = None  # cores each stack may use; None: the whole machine

    def body(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "input": f"Write about toll roads and the traffic on them in {self.output_tokens} tokens.",
            # A cap above the answer's length (the simulator ends within a sentence of
            # it), so every answer is complete.
            "max_output_tokens": self.output_tokens + 100,
        }

    def stack_env(self, variant: str) -> dict[str, str]:
        if variant == OFF:
            return {MAX_IN_FLIGHT: "0"}
        if variant == FIXED:
            return {MAX_IN_FLIGHT: str(self.max_in_flight), ADAPTIVE_ADMISSION: "false"}
        return dict(self.adaptive_env)


FULL = Plan()
QUICK = Plan(
    concurrency=(12, 24), sweep=(2, 4), sweep_reps=1, output_tokens=200, alone_runs=1,
    timeout_s=30.0, bursts=2, max_in_flight=4,
    adaptive_env=(
        (MAX_IN_FLIGHT, "6"), ("TURNPIKE_ADAPTIVE_INITIAL_IN_FLIGHT", "6"),
        ("TURNPIKE_ADAPTIVE_MIN_IN_FLIGHT", "2"),
    ),
)  # fmt: skip


def cores(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError("cores must be > 0")
    return value


OPTIONS: list[common.Option] = [
    ("--requests", "concurrency", positive_ints, "N at once (300,600)"),
    ("--sweep", "sweep", positive_ints, "streams at once, swept (8,16,...,256)"),
    ("--tokens", "output_tokens", int, "output tokens asked for (2000)"),
    ("--bursts", "bursts", int, "bursts of each N on each stack (3)"),
    ("--max-in-flight", "max_in_flight", int, "the fixed stack's bound (64)"),
    ("--cpu-quota", "cpu_quota", cores, "cores each stack may use (the whole machine)"),
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
    variant: str, n: int, shots: list[Shot], cost: dict, alone_ms: float | None, burst: int = 1
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
        "burst": burst,
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
        for burst_no in range(1, plan.bursts + 1):
            for variant, target in stacks.items():
                label = f"{n} at once, shedding {variant}, burst {burst_no}/{plan.bursts}"
                log(label)
                shots, cost = await burst(target, n, plan, label)
                record = run_record(variant, n, shots, cost, base[variant], burst_no)
                await settled_usage(target)
                record["admission_after"] = await admission_block(target)
                runs.append(record)
                log(f"  {run_line(record)}{bound_text(record)}")
    return {
        "alone": references,
        "sweep": sweep,
        "capacity": capacity(sweep),
        "runs": runs,
    }


async def admission_block(target: Target) -> dict[str, Any] | None:
    """The gateway's admission as /readyz reports it (the adaptive bound where it moved)."""
    url = target.base_url.rsplit("/v1", 1)[0] + "/readyz"
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=10) as http:
            block: dict[str, Any] | None = (await http.get(url)).json().get("admission")
            return block
    except (httpx.HTTPError, ValueError):
        return None


def bound_text(r: dict[str, Any]) -> str:
    block = r.get("admission_after") or {}
    if not block.get("adaptive"):
        return ""
    return (
        f"; bound now {block['bound']} (time to first token {fmt(block.get('time_to_first_token_ms'), 0)}"
        f" ms against a baseline of {fmt(block.get('baseline_ms'), 0)} ms)"
    )


def worst(values: list[float | None]) -> float | None:
    """The highest of the bursts' values (None where no burst has one)."""
    found = [v for v in values if v is not None]
    return max(found) if found else None


def targets(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per N and shedding stack, its worst burst against each goal; every stack: none hung."""
    out = []
    sizes = sorted({r["requests"] for r in data["runs"]})
    for n in sizes:
        for variant in SHEDDING:
            runs = [r for r in data["runs"] if r["requests"] == n and r["variant"] == variant]
            if not runs:
                continue
            alone = data["alone"][variant]["latency_ms"]["p50"]
            ratio = worst([r["admitted_p50_vs_alone"] for r in runs])
            ratios = ", ".join(common_x(r["admitted_p50_vs_alone"]) for r in runs)
            out.append(
                {
                    "name": f"{n} at once, {variant} bound: admitted p50 vs one alone, worst burst",
                    "goal": f"within {TARGET_LATENCY_RATIO:g}x",
                    "measured": ratio,
                    "pass": None if ratio is None else ratio <= TARGET_LATENCY_RATIO,
                    "detail": f"bursts {ratios} (one alone {fmt(alone, 0)} ms); admitted "
                    + ", ".join(str(r["admitted"]) for r in runs),
                }
            )
            p50 = worst([r["rejected_ms"]["p50"] for r in runs])
            out.append(
                {
                    "name": f"{n} at once, {variant} bound: rejected answered in, p50, worst burst",
                    "goal": f"< {TARGET_REJECT_P50_MS:,.0f} ms",
                    "measured": p50,
                    "pass": None if p50 is None else p50 < TARGET_REJECT_P50_MS,
                    "detail": "bursts "
                    + ", ".join(
                        f"{fmt(r['rejected_ms']['p50'], 0)} (p99 {fmt(r['rejected_ms']['p99'], 0)})"
                        for r in runs
                    )
                    + f" ms; {sum(r['rejected'] for r in runs):,} rejected "
                    f"({sum(r['rejected_with_retry_after'] for r in runs):,} with retry-after)",
                }
            )
    hung = sum(r["hung"] for r in data["runs"])
    total = sum(r["requests"] for r in data["runs"])
    out.append(
        {
            "name": "every burst, every stack: hung requests",
            "goal": "0",
            "measured": hung,
            "pass": hung == 0,
            "detail": f"{hung} of {total:,} unanswered after {data['params']['timeout_s']:g} s",
        }
    )
    return out


def shedding_text(plan: Plan, runs: list[dict[str, Any]]) -> dict[str, str]:
    """How each shedding stack was set, and the most it admitted from one burst."""
    texts = {}
    for variant in SHEDDING:
        most = max((r["admitted"] for r in runs if r["variant"] == variant), default=None)
        seen = f"; at most {most} admitted from one burst" if most is not None else ""
        env = plan.stack_env(variant)
        how = ", ".join(f"`{k}={v}`" for k, v in env.items()) or "the gateway's defaults"
        texts[variant] = how + seen
    return texts


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
    shed = data["shedding"]
    quota = data.get("cpu_quota")
    where = (
        f"Each stack's processes held to {quota['describe']}; the load generator outside, on "
        "the whole machine. "
        if quota
        else ""
    )
    intro = (
        f"Three private stacks, started side by side: shedding **off** (`{MAX_IN_FLIGHT}=0`), "
        f"a **fixed** bound ({shed[FIXED]}) and the **adaptive** bound ({shed[ADAPTIVE]}). "
        f"{where}Every request asks `{p['model']}` "
        f"({p['model_tokens_per_s']:,.0f} tokens/s) for about {p['output_tokens']:,} tokens "
        f'("... in {p["output_tokens"]} tokens", `max_output_tokens` '
        f"{p['output_tokens'] + 100:,}), streamed over HTTP with SSE, each on a connection of "
        f"its own, all sent at once, each waited for at most {p['timeout_s']:g} s (past that, "
        f"hung); each N {p['bursts']} times on each stack, the stacks in turn. Latency = from "
        "the connect to the terminal event (or to the error answer); "
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
    lines += [
        "",
        "## N requests at once",
        "",
        "Bursts in the order they ran; **bound after**: the gateway's in-flight bound once the "
        "burst was over (/readyz), with the adaptive bound's signal (median time to first "
        "token of its last window) and baseline.",
        "",
    ]
    rows = []
    for r in sorted(data["runs"], key=lambda r: (r["requests"], r["burst"])):
        a, j = r["admitted_ms"], r["rejected_ms"]
        rows.append(
            [
                r["variant"],
                f"{r['requests']:,}",
                str(r["burst"]),
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
                bound_cell(r),
            ]
        )
    lines += markdown_table(
        [
            "shedding",
            "requests",
            "burst",
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
            "bound after (TTFT / baseline ms)",
        ],
        rows,
        2,
    )
    answers = []
    for r in data["runs"]:
        for kind, v in r["by_outcome"].items():
            status, count, told = str(v["status"] or "-"), f"{v['count']:,}", v["with_retry_after"]
            answers.append(
                [r["variant"], f"{r['requests']:,}", str(r["burst"]), kind, status, count,
                 f"{told:,}"]
            )  # fmt: skip
    lines += ["", "Answers by kind:", ""]
    lines += markdown_table(
        ["shedding", "requests", "burst", "answer", "status", "count", "with retry-after"],
        answers,
        4,
    )
    if quota:
        lines += ["", "CPU quota: time each stack's processes waited for their next period:", ""]
        lines += [
            f"- {v}: throttled in {t['throttled_periods']:,} of {t['periods']:,} periods, "
            f"{t['throttled_s']:.1f} s in all"
            for v, t in quota["throttled"].items()
        ]
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
        f"![{results_stem_of(data)}.png]({results_stem_of(data)}.png)",
    ]
    return "\n".join(lines) + "\n"


def results_stem_of(data: dict[str, Any]) -> str:
    params = data["params"]
    return results_stem(Plan(cpu_quota=params.get("cpu_quota")))


def common_x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def bound_cell(r: dict[str, Any]) -> str:
    block = r.get("admission_after") or {}
    if "bound" not in block:
        return "-"
    if not block.get("adaptive"):
        return str(block["bound"]) if block["bound"] else "off"
    signal, baseline = block.get("time_to_first_token_ms"), block.get("baseline_ms")
    return f"{block['bound']} ({fmt(signal, 0)} / {fmt(baseline, 0)})"


def results_stem(plan: Plan) -> str:
    """``overload``; under a quota, ``overload-half-cpu`` (half the machine's cores) or
    ``overload-cpu-<cores>``."""
    if plan.cpu_quota is None:
        return "overload"
    if plan.cpu_quota * 2 == (os.cpu_count() or 0):
        return "overload-half-cpu"
    return f"overload-cpu-{plan.cpu_quota:g}"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = common.parser(
        "python -m bench.admission.overload",
        "Bursts of N requests of ~2,000 tokens at once against stacks with shedding off, at "
        "a fixed bound and at the adaptive bound, one request alone as the reference, and "
        "the capacity sweep; optionally with each stack held to a CPU quota.",
        "12 and 24 requests of 200 tokens, twice each, a fixed bound of 4 and an adaptive "
        "one of at most 6, a sweep of 2 and 4",
    )
    args, plan = common.parse_plan(parser, argv, OPTIONS, FULL, QUICK)
    run = common.Run(argv, "bench-overload", args.quick, args.note)
    stacks: dict[str, Target] = {}
    quotas: dict[str, CpuQuota] = {}
    try:
        for variant in (OFF, FIXED, ADAPTIVE):
            stacks[variant] = common.start_stack(plan.stack_env(variant), f"shedding {variant}")
            if plan.cpu_quota is not None:
                # One group per stack: the stacks run in turn, each as if alone on a
                # machine of that size.
                quotas[variant] = CpuQuota(
                    f"turnpike-bench-{os.getpid()}-{variant}", plan.cpu_quota
                )
                quotas[variant].add(stacks[variant].pids.values())
                log(f"  held to {quotas[variant].describe()}")
        import uvloop

        results = uvloop.run(measure(stacks, plan))
        throttled = {v: q.throttled() for v, q in quotas.items()}
    except QuotaUnavailable as exc:
        log(f"this machine cannot hold a stack to a CPU quota: {exc}")
        return 2
    finally:
        for target in stacks.values():
            target.stop()
        for quota in quotas.values():
            quota.remove()
    data = run.header("Overload: shedding off, at a fixed bound and at the adaptive bound")
    data |= {
        "stacks": {v: t.description for v, t in stacks.items()},
        "shedding": shedding_text(plan, results["runs"]),
        "params": asdict(plan),
        **results,
    }
    if quotas:
        first = next(iter(quotas.values()))
        data["cpu_quota"] = {"describe": first.describe(), "throttled": throttled}
    data["targets"] = targets(data)
    stem = results_stem(plan)
    common.write_results(data, args.out.resolve(), stem, markdown, overload_plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
