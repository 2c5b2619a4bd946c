"""``python -m bench.admission.fairness`` (``make bench-fairness``): does one tenant's flood
slow another tenant down?

A private stack with a tenants file of keys made for the run. Tenant A runs agent loops
within its limits (the load benchmark's loop over WebSocket: ``bench.load``); tenant B
floods at many times its request limit with concurrent HTTP requests, never retried. Two
phases in one run: A alone, then A while B floods. Reported: A's per-turn API overhead in
each phase (and their ratio), A's errors, B's answers by status with their latency, and
the billing ledger against what the clients saw: every completed response billed once,
nothing else billed. Results in ``bench/results/fairness.{json,md,png}``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from bench.admission import common
from bench.admission.common import COMPLETED, AnswerChannel, Shot, fmt, shoot
from bench.admission.plots import fairness_plot
from bench.load.__main__ import Plan as LoadPlan
from bench.load.__main__ import warm_up
from bench.load.driver import channel_factory, play, rollouts_for, settled_usage
from bench.load.stats import Tally, dist
from bench.load.transports import WEBSOCKET, Reply
from bench.loop.rollout import repo_corpus
from bench.loop.stack import CpuMeter, Target
from bench.services.common import log, markdown_table

PLOT = "fairness.png"
ALONE, FLOOD = "alone", "flood"
TARGET_RATIO = 1.25


@dataclass(frozen=True)
class Plan:
    loops: int = 5  # tenant A's agent loops, over WebSocket
    turns: int = 25  # per rollout
    rounds: int = 2  # of the two phases, A alone then A while B floods
    phase_s: float = 15.0  # each phase: A's loops start rollouts until then
    b_requests_per_minute: int = 120  # tenant B's limit
    flood_factor: float = 20.0  # B sends this many times its limit
    burst_every_s: float = 0.25  # B sends its requests in bursts this far apart
    model: str = "turnpike-sim"
    stagger_s: float = 0.5
    turn_timeout_s: float = 60.0
    b_timeout_s: float = 30.0  # B's client gives up after this: a hung request
    warmup_turns: int = 3

    @property
    def flood_per_s(self) -> float:
        return self.b_requests_per_minute * self.flood_factor / 60

    def a_limits(self) -> dict[str, int]:
        """Well above what A's loops send (about 10 turns/s a loop, each re-reading up to
        30k tokens of history), so A stays within them."""
        return {
            "requests_per_minute": 60_000,
            "tokens_per_minute": 1_000_000_000,
            "max_concurrent_responses": 4 * self.loops,
            "max_websocket_connections": 4 * self.loops,
        }

    def b_limits(self) -> dict[str, int]:
        return {"requests_per_minute": self.b_requests_per_minute}


FULL = Plan()
QUICK = Plan(loops=2, turns=4, rounds=1, phase_s=5.0, b_requests_per_minute=60, stagger_s=0.1)


OPTIONS: list[common.Option] = [
    ("--loops", "loops", int, "tenant A's agent loops (5)"),
    ("--rounds", "rounds", int, "rounds of the two phases (2)"),
    ("--phase-s", "phase_s", float, "seconds per phase (15)"),
    ("--b-rpm", "b_requests_per_minute", int, "tenant B's requests per minute (120)"),
    ("--burst-every", "burst_every_s", float, "seconds between B's bursts (0.25; small: even)"),
]


@dataclass
class TimedTally(Tally):
    """The load generator's tally, also keeping when each turn ended and which response
    it completed (for the plot and the ledger)."""

    origin: float = 0.0
    ended_s: list[float] = field(default_factory=list)
    response_ids: list[str] = field(default_factory=list)

    def completed(self, reply: Reply) -> None:
        super().completed(reply)
        self.ended_s.append(time.perf_counter() - self.origin)
        self.response_ids.append(reply.response["id"])


# -- tenant A: agent loops ---------------------------------------------------------------


async def loop_until(
    target: Target, plan: Plan, corpus: dict[str, str], tally: Tally, delay_s: float, end: float
) -> None:
    """One agent loop on a socket of its own: rollouts back to back, a new one started
    while the phase lasts."""
    channel = channel_factory(target, WEBSOCKET)()
    cell = LoadPlan(model=plan.model, turns=plan.turns).cell()
    await asyncio.sleep(delay_s)
    try:
        while time.perf_counter() < end:
            await play(channel, rollouts_for(corpus, plan.turns, 1)[0], cell, tally)
    finally:
        await channel.close()


async def run_a(target: Target, plan: Plan, corpus: dict[str, str], tally: Tally) -> None:
    end = time.perf_counter() + plan.phase_s
    await asyncio.gather(
        *(
            loop_until(target, plan, corpus, tally, plan.stagger_s * i / plan.loops, end)
            for i in range(plan.loops)
        )
    )


# -- tenant B: the flood -----------------------------------------------------------------


class Flood:
    """B's requests at ``flood_per_s``, in bursts, each on an idle keep-alive connection
    or a new one, never retried, until ``stop()``; then every request is awaited. A
    connection idle for ``REUSE_IDLE_S`` is closed, not reused: the server closes its
    own after 5 s (uvicorn's keep-alive timeout), and a request sent as it does would
    meet a closed socket, as no HTTP client lets it."""

    REUSE_IDLE_S = 4.0

    def __init__(self, target: Target, plan: Plan, origin: float) -> None:
        self.target, self.plan, self.origin = target, plan, origin
        self.shots: list[Shot] = []
        self.sent = 0
        self._idle: list[tuple[AnswerChannel, float]] = []  # with when it went idle
        self._pending: set[asyncio.Task] = set()
        self._stop = asyncio.Event()
        self.body = {
            "model": plan.model,
            "input": "Say hello to the other tenants.",
            "max_output_tokens": 256,
        }

    def stop(self) -> None:
        self._stop.set()

    async def _connection(self) -> AnswerChannel:
        while self._idle:
            channel, since = self._idle.pop()  # the most recently used first
            if time.perf_counter() - since < self.REUSE_IDLE_S:
                return channel
            await channel.close()
        return AnswerChannel(self.target.base_url, self.target.api_key)

    async def _one(self) -> None:
        channel = await self._connection()
        self.shots.append(await shoot(channel, self.body, self.plan.b_timeout_s, self.origin))
        if channel.is_open:
            self._idle.append((channel, time.perf_counter()))

    async def run(self) -> float:
        """Returns the seconds it flooded."""
        start = time.perf_counter()
        ticks = 0
        while not self._stop.is_set():
            due = round((time.perf_counter() - start) * self.plan.flood_per_s) + round(
                self.plan.burst_every_s * self.plan.flood_per_s
            )
            for _ in range(max(0, due - self.sent)):
                task = asyncio.create_task(self._one())
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)
                self.sent += 1
            ticks += 1
            next_tick = start + ticks * self.plan.burst_every_s
            try:
                await asyncio.wait_for(self._stop.wait(), max(0.0, next_tick - time.perf_counter()))
            except TimeoutError:
                pass
        flooded = time.perf_counter() - start
        await asyncio.gather(*self._pending)
        for channel, _ in self._idle:
            await channel.close()
        return flooded


# -- the run -----------------------------------------------------------------------------


def phase_record(
    name: str, number: int, tally: TimedTally, start: float, cpu_ms: dict[str, float]
) -> dict[str, Any]:
    """One phase of A's loops, from ``start`` (``perf_counter``) to now."""
    wall_s = time.perf_counter() - start
    return {
        "phase": name,
        "round": number,
        "start_s": round(start - tally.origin, 3),
        "wall_s": round(wall_s, 3),
        "turns_sent": tally.sent,
        "turns_ok": tally.ok,
        "turns_per_s": round(tally.ok / wall_s, 2) if wall_s > 0 else None,
        "errors": dict(tally.errors.most_common()),
        "error_count": sum(tally.errors.values()),
        "error_messages": tally.messages,
        "overhead_ms": dist(tally.overhead_ms),
        "turn_ms": dist(tally.turn_ms),
        "pipelines": dict(tally.pipelines),
        "cpu_cores": {k: round(v / (wall_s * 1000), 3) for k, v in sorted(cpu_ms.items())},
        # For the plot: when each turn ended (s on the run's clock) and its overhead.
        "series": [
            [round(t, 3), round(o, 3)]
            for t, o in zip(tally.ended_s, tally.overhead_ms, strict=True)
        ],
    }


async def measure(a: Target, b: Target, plan: Plan, ledger: Path) -> dict[str, Any]:
    corpus = repo_corpus()
    log(f"warm-up: one {plan.warmup_turns}-turn loop of tenant A over WebSocket (not counted)")
    warm = LoadPlan(transports=(WEBSOCKET,), model=plan.model, warmup_turns=plan.warmup_turns)
    warmup_errors = await warm_up(a, warm, corpus)
    await settled_usage(a)
    billed_before = set(common.ledger_events(ledger))
    origin = time.perf_counter()
    meter = CpuMeter(a.pids)
    phases: list[dict[str, Any]] = []
    tallies: dict[str, list[TimedTally]] = {ALONE: [], FLOOD: []}
    shots: list[Shot] = []
    sent, flood_s = 0, 0.0
    # The phases alternate, so a drift in the machine's other load hits both alike.
    for number in range(1, plan.rounds + 1):
        log(
            f"round {number}/{plan.rounds}, phase 1, A alone: {plan.loops} agent loops over "
            f"WebSocket for {plan.phase_s:g} s"
        )
        alone = TimedTally(origin=origin)
        tallies[ALONE].append(alone)
        meter.start()
        start = time.perf_counter()
        await common.with_progress("A alone", partial(a_line, alone), run_a(a, plan, corpus, alone))
        phases.append(phase_record(ALONE, number, alone, start, meter.stop()))
        log(f"  A alone: {phase_line(phases[-1])}")

        log(
            f"round {number}/{plan.rounds}, phase 2, A while B floods: B sends "
            f"{plan.flood_per_s:g} requests/s over HTTP ({plan.flood_factor:g}x its "
            f"{plan.b_requests_per_minute} a minute), in bursts every {plan.burst_every_s:g} s, "
            "never retried"
        )
        flooded = TimedTally(origin=origin)
        tallies[FLOOD].append(flooded)
        flood = Flood(b, plan, origin)
        meter.start()
        start = time.perf_counter()
        flooding = asyncio.create_task(flood.run())

        line = partial(both_line, flooded, flood)
        await common.with_progress("A while B floods", line, run_a(a, plan, corpus, flooded))
        phases.append(phase_record(FLOOD, number, flooded, start, meter.stop()))
        flood.stop()
        flood_s += await flooding
        shots += flood.shots
        sent += flood.sent
        log(f"  A while B floods: {phase_line(phases[-1])}")
        log(f"  B: {b_line(flood.shots, flood.sent)}")

    log("billing: waiting for the gateway's outbox, then reading the ledger")
    usage = await settled_usage(a)
    seen = {
        "A": [rid for kind in tallies.values() for t in kind for rid in t.response_ids],
        "B": [s.response_id for s in shots if s.response_id],
    }
    check = common.ledger_check(seen, common.ledger_events(ledger), billed_before)
    check["pending_events_after"] = usage.get("pending_events", 0)
    log(
        f"  ledger: {check['ledger_events']} events; A {check['clients']['A']['billed']}/"
        f"{check['clients']['A']['completed']} completed billed, B "
        f"{check['clients']['B']['billed']}/{check['clients']['B']['completed']}; "
        f"{check['billed_not_completed']} billed without a completed answer"
    )
    return {
        "warmup_errors": warmup_errors,
        "phases": phases,
        "pooled": {
            kind: pooled_record(kind, [p for p in phases if p["phase"] == kind], found)
            for kind, found in tallies.items()
        },
        "flood": flood_record(shots, sent, flood_s, plan),
        "ledger": check,
    }


def pooled_record(
    kind: str, phases: list[dict[str, Any]], tallies: list[TimedTally]
) -> dict[str, Any]:
    """Every phase of one kind together: the figures the targets are judged on."""
    errors: Counter[str] = Counter()
    for t in tallies:
        errors.update(t.errors)
    wall = sum(p["wall_s"] for p in phases)
    ok = sum(t.ok for t in tallies)
    return {
        "phase": kind,
        "phases": len(phases),
        "wall_s": round(wall, 3),
        "turns_sent": sum(t.sent for t in tallies),
        "turns_ok": ok,
        "turns_per_s": round(ok / wall, 2) if wall > 0 else None,
        "errors": dict(errors.most_common()),
        "error_count": sum(errors.values()),
        "overhead_ms": dist([o for t in tallies for o in t.overhead_ms]),
        "turn_ms": dist([o for t in tallies for o in t.turn_ms]),
        "cpu_cores": {
            name: round(sum(p["cpu_cores"].get(name, 0.0) * p["wall_s"] for p in phases) / wall, 3)
            for name in phases[0]["cpu_cores"]
        }
        if phases and wall > 0
        else {},
    }


def a_line(tally: Tally) -> str:
    errors = sum(tally.errors.values())
    return f"A {tally.ok} turns" + (f", {errors} errors" if errors else "")


def b_line(shots: list[Shot], sent: int) -> str:
    counts = Counter(s.outcome for s in shots)
    answers = ", ".join(f"{k} x{v}" for k, v in counts.most_common())
    return f"{sent} sent, {len(shots)} done ({answers or 'none yet'})"


def both_line(tally: Tally, flood: Flood) -> str:
    return f"{a_line(tally)}; B {b_line(flood.shots, flood.sent)}"


def phase_line(p: dict[str, Any]) -> str:
    o = p["overhead_ms"]
    return (
        f"{p['turns_ok']} turns, {p['turns_per_s']} turns/s; overhead p50/p90/p99 "
        f"{o['p50']}/{o['p90']}/{o['p99']} ms; {p['error_count']} errors"
    )


def flood_record(shots: list[Shot], sent: int, seconds: float, plan: Plan) -> dict[str, Any]:
    return {
        "sent": sent,
        "answered": sum(s.status > 0 for s in shots),  # an HTTP answer, of any status
        "seconds": round(seconds, 3),
        "sent_per_s": round(sent / seconds, 2) if seconds > 0 else None,
        "times_limit": round(sent / seconds * 60 / plan.b_requests_per_minute, 2)
        if seconds > 0
        else None,
        "by_outcome": common.by_outcome(shots),
        "latency_ms": dist([s.latency_ms for s in shots]),
        "timeouts": sum(s.outcome == common.TIMEOUT for s in shots),
        # For the plot: when each request started (s on the run's clock) and its status.
        "series": [[round(s.at_s, 3), s.status, s.outcome == COMPLETED] for s in shots],
    }


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    by = results["pooled"]
    alone, flooded = by[ALONE]["overhead_ms"], by[FLOOD]["overhead_ms"]
    p50 = common.ratio(flooded["p50"], alone["p50"])
    p90 = common.ratio(flooded["p90"], alone["p90"])
    errors = by[ALONE]["error_count"] + by[FLOOD]["error_count"]
    flood = results["flood"]
    outcomes = flood["by_outcome"]
    limited = sum(v["count"] for v in outcomes.values() if v["status"] == 429)
    lat = flood["latency_ms"]
    ledger = results["ledger"]
    return [
        {
            "name": "A's p50 per-turn API overhead, with B flooding vs alone",
            "goal": f"within {TARGET_RATIO}x",
            "measured": p50,
            "pass": None if p50 is None else p50 <= TARGET_RATIO,
            "detail": f"{fmt(alone['p50'], 2)} -> {fmt(flooded['p50'], 2)} ms (p90 "
            f"{fmt(alone['p90'], 2)} -> {fmt(flooded['p90'], 2)} ms, {fmt(p90, 2)}x), each "
            f"over {by[ALONE]['phases']} phase(s), alternated",
        },
        {
            "name": "A's errors",
            "goal": "0",
            "measured": errors,
            "pass": errors == 0,
            "detail": "; ".join(
                f"{p['phase']} {p['round']}: {p['errors']}"
                for p in results["phases"]
                if p["errors"]
            )
            or f"none in {by[ALONE]['turns_sent'] + by[FLOOD]['turns_sent']} turns",
        },
        {
            "name": "B answered with 429s, none hung",
            "goal": "429s, 0 timeouts",
            "measured": flood["timeouts"],
            "pass": limited > 0 and flood["timeouts"] == 0 and flood["answered"] == flood["sent"],
            "detail": f"{flood['answered']}/{flood['sent']} answered, {limited} with 429, "
            f"{flood['timeouts']} timeouts; latency p50 {fmt(lat['p50'], 2)} ms, p99 "
            f"{fmt(lat['p99'], 2)} ms",
        },
        {
            "name": "The ledger: every completed response billed once, nothing else",
            "goal": "exact",
            "measured": ledger["billed_not_completed"]
            + sum(c["missing"] for c in ledger["clients"].values()),
            "pass": ledger["pass"],
            "detail": "; ".join(
                f"{label} {c['billed']}/{c['completed']} billed"
                for label, c in ledger["clients"].items()
            )
            + f"; {ledger['billed_not_completed']} billed without a completed answer",
        },
    ]


# -- the report --------------------------------------------------------------------------


def markdown(data: dict[str, Any]) -> str:
    p = data["params"]
    intro = (
        f"One private stack with a tenants file written for the run (keys minted for it, "
        f"stored as sha256 hashes). **Tenant A** runs {p['loops']} agent loops at once over "
        f"WebSocket: the load benchmark's rollout (`bench/load`: 8 tools, ~4 KB tool outputs "
        f"and a nudge, chained with `previous_response_id`, {p['turns']} turns a rollout) on "
        f"`{p['model']}`, within its limits ({limits_text(p['a_limits'])}). **Tenant B** "
        f"({limits_text(p['b_limits'])}) floods at {p['flood_factor']:g}x that: "
        f"{p['flood_per_s']:g} short requests a second over HTTP with SSE, sent in bursts "
        f"every {p['burst_every_s']:g} s on keep-alive connections, never retried, each "
        f"waited for at most {p['b_timeout_s']:g} s. Phase 1: A alone for "
        f"{p['phase_s']:g} s; phase 2: A again while B floods (a rollout under way at the end "
        f"is finished); {p['rounds']} round(s) of the two, alternated so that a drift in the "
        "machine's other load hits both alike, the targets judged on each kind's phases "
        "together. API overhead = turn time - the worker's model time "
        "(`turnpike.model_ms.total_ms`), per completed turn; percentiles nearest-rank."
    )
    lines = common.report_head(data, intro)
    lines += ["", "## Tenant A, per phase", ""]
    rows = []
    every = [(f"{ph['phase']}, round {ph['round']}", ph) for ph in data["phases"]]
    every += [(f"**{kind}, all**", ph) for kind, ph in data["pooled"].items()]
    for name, ph in every:
        o, t = ph["overhead_ms"], ph["turn_ms"]
        cores = ph["cpu_cores"]
        rows.append(
            [
                name,
                f"{ph['turns_ok']:,}/{ph['turns_sent']:,}",
                fmt(ph["turns_per_s"]),
                fmt(o["p50"], 2),
                fmt(o["p90"], 2),
                fmt(o["p99"], 2),
                fmt(t["p50"]),
                str(ph["error_count"]),
                fmt(cores.get("gateway"), 2),
                fmt(sum(cores.values()), 2),
            ]
        )
    lines += markdown_table(
        [
            "phase",
            "turns ok/sent",
            "turns/s",
            "overhead p50 ms",
            "p90",
            "p99",
            "turn p50 ms",
            "errors",
            "gateway cores",
            "stack cores",
        ],
        rows,
        1,
    )
    f = data["flood"]
    lines += [
        "",
        "## Tenant B's answers",
        "",
        f"{f['sent']:,} requests sent over {f['seconds']:.1f} s ({f['sent_per_s']:g}/s, "
        f"{f['times_limit']:g}x its limit), {f['answered']:,} answered, {f['timeouts']} "
        "timed out.",
        "",
    ]
    rows = [
        [
            outcome,
            str(v["status"] or "-"),
            f"{v['count']:,}",
            fmt(v["latency_ms"]["p50"], 2),
            fmt(v["latency_ms"]["p99"], 2),
            fmt(v["latency_ms"]["max"], 2),
            f"{v['with_retry_after']:,}",
        ]
        for outcome, v in f["by_outcome"].items()
    ]
    lines += markdown_table(
        ["answer", "status", "count", "latency p50 ms", "p99", "max", "with retry-after"], rows, 2
    )
    led = data["ledger"]
    lines += [
        "",
        "## The ledger",
        "",
        f"Read from the billing service's SQLite ledger once the gateway's outbox was empty "
        f"({led['pending_events_after']} events pending), counting only events written after "
        f"the warm-up: {led['ledger_events']:,} "
        f"({', '.join(f'{k} {v:,}' for k, v in led['ledger_events_by_tenant'].items()) or 'none'}).",
        "",
    ]
    rows = [
        [
            label,
            f"{c['completed']:,}",
            f"{c['billed']:,}",
            str(c["missing"]),
            ", ".join(c["billed_as"]) or "-",
        ]
        for label, c in led["clients"].items()
    ]
    lines += markdown_table(["client", "completed", "billed", "not billed", "billed as"], rows, 1)
    lines += [
        "",
        f"Billed without a completed answer (a rejected request billed, or an answer lost): "
        f"{led['billed_not_completed']}. The ledger's key is the response id, so no response "
        "is billed twice.",
    ]
    if data.get("warmup_errors"):
        lines += ["", f"The warm-up met errors before it went through: {data['warmup_errors']}."]
    errors = [
        (f"{ph['phase']} {ph['round']}", k, v)
        for ph in data["phases"]
        for k, v in ph["errors"].items()
    ]
    if errors:
        lines += ["", "## A's errors", ""]
        lines += markdown_table(
            ["phase", "kind", "count"], [[a, b, str(c)] for a, b, c in errors], 2
        )
    lines += ["", "## Plot", "", f"![{PLOT}]({PLOT})"]
    return "\n".join(lines) + "\n"


def limits_text(limits: dict[str, int]) -> str:
    return ", ".join(f"`{k}: {v:,}`" for k, v in limits.items())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = common.parser(
        "python -m bench.admission.fairness",
        "Tenant A's agent loops alone, then while tenant B floods at 20x its request limit.",
        "2 loops of 4-turn rollouts, one round of 5 s phases",
    )
    args, plan = common.parse_plan(parser, argv, OPTIONS, FULL, QUICK)
    run = common.Run(argv, "bench-fairness", args.quick, args.note)
    keys = {"a": common.mint_key("a"), "b": common.mint_key("b")}
    with tempfile.TemporaryDirectory(prefix="turnpike-fairness-") as folder:
        tenants = Path(folder) / "tenants.yaml"
        tenants.write_text(
            common.tenants_yaml(
                {"a": (keys["a"], plan.a_limits()), "b": (keys["b"], plan.b_limits())}
            )
        )
        stack = common.start_stack({"TURNPIKE_TENANTS_FILE": str(tenants)}, "tenants A and B")
        try:
            assert stack.local is not None  # a stack started here
            a = replace(stack, api_key=keys["a"], local=None, state_dir=None)
            b = replace(stack, api_key=keys["b"], local=None, state_dir=None)
            import uvloop

            results = uvloop.run(measure(a, b, plan, stack.local.config.ledger_path))
        finally:
            stack.stop()
    data = run.header("Fairness: one tenant floods, another runs agent loops")
    data |= {
        "stack": stack.description,
        "params": asdict(plan)
        | {
            "flood_per_s": plan.flood_per_s,
            "a_limits": plan.a_limits(),
            "b_limits": plan.b_limits(),
        },
        **results,
    }
    data["targets"] = targets(data)
    common.write_results(data, args.out.resolve(), "fairness", markdown, fairness_plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
