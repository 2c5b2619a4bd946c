"""Billing: CPU per recorded event and throughput, in-process and over gRPC, as the gateway
delivers events (one call each, or its outbox's batches) from 1 to 32 concurrent producers,
including idempotent replays of the same events (which must leave the totals unchanged)."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.loop.stack import cpu_seconds, pids_listening
from bench.services.common import Context, Report, Table, log, ms, rate, summarize
from turnpike.billing.ledger import Ledger, UsageEvent
from turnpike.billing.v1 import billing_pb2, billing_pb2_grpc
from turnpike.gateway.upstream.billing_outbox import MAX_BATCH, BillingOutbox
from turnpike.grpc_client import insecure_channel

NEEDS = ("billing",)
TENANT = "bench"
MODELS = ("turnpike-sim", "turnpike-sim-65")
CONCURRENCY = (1, 8, 32)
LOCAL_GROUP = 32  # events per commit in the in-process grouped pass

# How events reach billing: one RecordUsage per event, each caller awaiting its own answer
# (group commit alone); the gateway's outbox sending one event per call, as it did before
# batches; and the outbox as it is, the events waiting together in one call.
MODES = {
    "record_usage": "RecordUsage, one call per event",
    "outbox_single": "the outbox, one event per call (before batches)",
    "outbox_batches": f"the outbox, batches of up to {MAX_BATCH}",
}


class TotalsChanged(RuntimeError):
    """A replay changed the billed totals: the ledger is not idempotent."""


def events(prefix: str, count: int) -> list[UsageEvent]:
    return [
        UsageEvent(
            event_id=f"resp_{prefix}_{i:06d}",
            tenant=TENANT,
            model=MODELS[i % len(MODELS)],
            input_tokens=8000 + i,
            cached_tokens=6000,
            output_tokens=200 + i % 50,
            created_at=1_760_000_000 + i,
        )
        for i in range(count)
    ]


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return round(statistics.median(known), 4) if known else None


def _cpu(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


# -- in-process: the ledger alone --------------------------------------------------------


def in_process(ctx: Context, folder: Path) -> list[dict]:
    """Each event its own commit, the same events replayed, and new events ``LOCAL_GROUP``
    to a commit; CPU is this process's (the fsync's kernel time included)."""
    count, rounds = ctx.pick(1000, 100), ctx.pick(3, 1)
    ledger = Ledger.open(folder / "ledger.sqlite3")
    phases = ("record", "replay", f"record {LOCAL_GROUP} per commit")
    walls: dict[str, list[float]] = {p: [] for p in phases}
    cpus: dict[str, list[float]] = {p: [] for p in phases}
    latencies: dict[str, list[float]] = {p: [] for p in phases}
    try:
        for r in range(rounds):
            batch = events(f"local{r}", count)
            grouped = events(f"group{r}", count)
            for phase in phases:
                before = ledger.usage(TENANT)
                began, cpu = time.perf_counter(), time.process_time()
                if phase == phases[2]:
                    for i in range(0, count, LOCAL_GROUP):
                        start = time.perf_counter()
                        if any(ledger.record_many(grouped[i : i + LOCAL_GROUP])):
                            raise TotalsChanged(f"a new event in group {i} answered duplicate")
                        latencies[phase].append(time.perf_counter() - start)
                else:
                    for event in batch:
                        start = time.perf_counter()
                        duplicate = ledger.record(event)
                        latencies[phase].append(time.perf_counter() - start)
                        if duplicate != (phase == "replay"):
                            raise TotalsChanged(f"{event.event_id}: duplicate={duplicate}")
                cpus[phase].append((time.process_time() - cpu) * 1000 / count)
                walls[phase].append(time.perf_counter() - began)
                if phase == "replay" and ledger.usage(TENANT) != before:
                    raise TotalsChanged("an in-process replay changed the totals")
        if ledger.usage(TENANT).responses != 2 * count * rounds:
            raise TotalsChanged("the ledger does not hold every recorded event once")
    finally:
        ledger.close()
    points = [
        {
            "transport": "in-process",
            "phase": phase,
            "concurrency": 1,
            "events_per_round": count,
            "rounds": rounds,
            "events_per_commit": LOCAL_GROUP if phase == phases[2] else 1,
            "events_per_s": summarize([count / w for w in walls[phase]], digits=1),
            "latency_ms": summarize(latencies[phase], 1000, digits=3),
            "cpu_ms_per_event": _median(cpus[phase]),
        }
        for phase in phases
    ]
    for p in points:
        log(
            f"billing in-process {p['phase']:6}: {rate(p['events_per_s']['median'])} events/s, "
            f"{ms(p['latency_ms'], 3)} ms per call, {_cpu(p['cpu_ms_per_event'])} ms CPU/event"
        )
    return points


# -- over gRPC: a billing process, and the ways the gateway delivers to it -----------------


class Acks:
    """The billing stub as the outbox sees it, that also answers each event's producer when
    the call carrying the event returns: an outbox producer then waits for its own event,
    as a RecordUsage caller does. Counts calls and duplicates."""

    def __init__(self, stub: billing_pb2_grpc.BillingStub) -> None:
        self._stub = stub
        self._waiting: dict[str, asyncio.Future[None]] = {}
        self.calls = 0
        self.duplicates = 0

    def expect(self, event_id: str) -> asyncio.Future[None]:
        future = asyncio.get_running_loop().create_future()
        self._waiting[event_id] = future
        return future

    async def RecordUsage(self, event, timeout=None):
        reply = await self._stub.RecordUsage(event, timeout=timeout)
        self._acked([event], [reply.duplicate])
        return reply

    async def RecordUsageBatch(self, request, timeout=None):
        reply = await self._stub.RecordUsageBatch(request, timeout=timeout)
        self._acked(request.events, reply.duplicate)
        return reply

    def _acked(self, delivered: Sequence, duplicates: Sequence[bool]) -> None:
        self.calls += 1
        self.duplicates += sum(duplicates)
        for event in delivered:
            self._waiting.pop(event.event_id).set_result(None)


@dataclass
class Pass:
    """One mode, one phase, one concurrency, one round."""

    wall_s: float
    latencies: list[float]
    calls: int
    duplicates: int
    billing_cpu_ms: float | None  # per event
    client_cpu_ms: float


@dataclass
class Billing:
    stub: billing_pb2_grpc.BillingStub
    pid: int | None
    recorded: int = 0
    passes: dict[tuple[str, str, int], list[Pass]] = field(default_factory=dict)

    async def totals(self) -> billing_pb2.UsageTotals:
        return await self.stub.GetUsage(billing_pb2.GetUsageRequest(tenant=TENANT))


async def _producers(
    send: Callable[[billing_pb2.UsageEvent], Awaitable[None]], batch: list, concurrency: int
) -> list[float]:
    """``concurrency`` producers, each sending an event and awaiting its answer before the
    next; the latency of each event."""
    queue = iter(batch)
    latencies: list[float] = []

    async def producer() -> None:
        for event in queue:  # shared iterator: each event is sent once
            start = time.perf_counter()
            await send(event)
            latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(producer() for _ in range(concurrency)))
    return latencies


async def _deliver(
    billing: Billing, mode: str, batch: list, concurrency: int
) -> tuple[list[float], int, int]:
    """Every event of ``batch`` to billing in ``mode``: (latencies, calls, duplicates)."""
    if mode == "record_usage":
        duplicates = 0

        async def call(event: billing_pb2.UsageEvent) -> None:
            nonlocal duplicates
            reply = await billing.stub.RecordUsage(event)
            duplicates += reply.duplicate  # after the await: += would read it before

        return await _producers(call, batch, concurrency), len(batch), duplicates
    acks = Acks(billing.stub)
    outbox = BillingOutbox(acks, max_batch=1 if mode == "outbox_single" else MAX_BATCH)
    outbox.start()

    async def submit(event: billing_pb2.UsageEvent) -> None:
        acked = acks.expect(event.event_id)
        await outbox.submit(event)
        await acked

    latencies = await _producers(submit, batch, concurrency)
    await outbox.close(timeout=5)
    return latencies, acks.calls, acks.duplicates


async def _measure(billing: Billing, mode: str, phase: str, batch: list, concurrency: int) -> None:
    before = await billing.totals()
    server_cpu = cpu_seconds(billing.pid) if billing.pid else None
    client_cpu, began = time.process_time(), time.perf_counter()
    latencies, calls, duplicates = await _deliver(billing, mode, batch, concurrency)
    wall = time.perf_counter() - began
    client = (time.process_time() - client_cpu) * 1000 / len(batch)
    server = None
    if server_cpu is not None and billing.pid and (now := cpu_seconds(billing.pid)) is not None:
        server = (now - server_cpu) * 1000 / len(batch)
    after = await billing.totals()
    if duplicates != (len(batch) if phase == "replay" else 0):
        raise TotalsChanged(f"{mode}: {duplicates} duplicates on {phase} of {len(batch)}")
    if phase == "record":
        billing.recorded += len(batch)
        if after.responses != billing.recorded:
            raise TotalsChanged(f"{after.responses} billed, {billing.recorded} sent")
    elif after != before:
        raise TotalsChanged(f"a replay ({mode}) changed the totals")
    billing.passes.setdefault((mode, phase, concurrency), []).append(
        Pass(wall, latencies, calls, duplicates, server, client)
    )


async def over_grpc(ctx: Context) -> list[dict]:
    count, rounds = ctx.pick(2000, 64), ctx.pick(3, 1)
    concurrencies = ctx.pick(CONCURRENCY, CONCURRENCY[:2])
    address = ctx.addresses["billing"]
    pid = pids_listening({int(address.rsplit(":", 1)[1]): "billing"}).get("billing")
    if pid is None:
        log("billing: its process was not found in /proc; CPU is not measured")
    async with insecure_channel(address) as channel:
        billing = Billing(billing_pb2_grpc.BillingStub(channel), pid)
        # Warm-up (connection, first transactions), not measured.
        await _deliver(billing, "record_usage", _pb(events("warm", 50)), 8)
        billing.recorded = (await billing.totals()).responses
        # Round-robin over modes and concurrencies, so load from elsewhere hits all alike.
        for r in range(rounds):
            for concurrency in concurrencies:
                for mode in MODES:
                    batch = _pb(events(f"{mode}_c{concurrency}r{r}", count))
                    for phase in ("record", "replay"):
                        await _measure(billing, mode, phase, batch, concurrency)
    points = []
    for (mode, phase, concurrency), passes in billing.passes.items():
        points.append(
            {
                "transport": "grpc",
                "mode": mode,
                "phase": phase,
                "concurrency": concurrency,
                "events_per_round": count,
                "rounds": len(passes),
                "events_per_s": summarize([count / p.wall_s for p in passes], digits=1),
                "latency_ms": summarize([x for p in passes for x in p.latencies], 1000, digits=3),
                "events_per_call": round(count * len(passes) / sum(p.calls for p in passes), 2),
                "billing_cpu_ms_per_event": _median([p.billing_cpu_ms for p in passes]),
                "client_cpu_ms_per_event": _median([p.client_cpu_ms for p in passes]),
            }
        )
        p = points[-1]
        log(
            f"billing grpc {phase:6} {mode:14} x{concurrency:<3}: "
            f"{rate(p['events_per_s']['median'])} events/s, {ms(p['latency_ms'], 3)} ms to "
            f"answer, {p['events_per_call']:g} per call, CPU/event billing "
            f"{_cpu(p['billing_cpu_ms_per_event'])} ms, client {_cpu(p['client_cpu_ms_per_event'])} ms"
        )
    return points


def _pb(batch: list[UsageEvent]) -> list[billing_pb2.UsageEvent]:
    return [billing_pb2.UsageEvent(**vars(e)) for e in batch]


# -- the report ----------------------------------------------------------------------------


def _cpu_line(remote: list[dict], mode: str, key: str) -> str:
    cells = [
        f"{_cpu(p[key])} ms at {p['concurrency']}"
        for p in remote
        if p["mode"] == mode and p["phase"] == "record"
    ]
    return ", ".join(cells)


def _derived(local: list[dict], remote: list[dict]) -> dict:
    derived: dict = {
        "in_process_record_events_per_s": local[0]["events_per_s"]["median"],
        "in_process_replay_events_per_s": local[1]["events_per_s"]["median"],
        "in_process_cpu_ms_per_event": local[0]["cpu_ms_per_event"],
        f"in_process_cpu_ms_per_event_{LOCAL_GROUP}_per_commit": local[2]["cpu_ms_per_event"],
    }
    for p in remote:
        if p["phase"] != "record":
            continue
        name = p["mode"]
        derived[f"billing_cpu_ms_per_event_{name}_x{p['concurrency']}"] = p[
            "billing_cpu_ms_per_event"
        ]
        derived[f"client_cpu_ms_per_event_{name}_x{p['concurrency']}"] = p[
            "client_cpu_ms_per_event"
        ]
        derived[f"grpc_events_per_s_{name}_x{p['concurrency']}"] = p["events_per_s"]["median"]
    derived["totals_unchanged_by_replays"] = True  # checked after every replay (else it raises)
    return derived


async def run(ctx: Context) -> Report:
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="turnpike-bench-ledger-") as folder:
        local = in_process(ctx, Path(folder))
    remote = await over_grpc(ctx)
    headline = [
        f"Billing's CPU per new event, the outbox before batches (one call per event): "
        f"{_cpu_line(remote, 'outbox_single', 'billing_cpu_ms_per_event')} producers; "
        f"in batches: {_cpu_line(remote, 'outbox_batches', 'billing_cpu_ms_per_event')}.",
        f"The gateway side (this process: producers, outbox, gRPC client) per event: "
        f"{_cpu_line(remote, 'outbox_single', 'client_cpu_ms_per_event')} before batches; "
        f"{_cpu_line(remote, 'outbox_batches', 'client_cpu_ms_per_event')} in batches.",
        f"One RecordUsage per event (group commit alone): "
        f"{_cpu_line(remote, 'record_usage', 'billing_cpu_ms_per_event')} producers.",
        f"In-process: {_cpu(local[0]['cpu_ms_per_event'])} ms CPU per event committed alone "
        f"(an fsync each), {_cpu(local[2]['cpu_ms_per_event'])} ms at {LOCAL_GROUP} per "
        f"commit; replays at {rate(local[1]['events_per_s']['median'])}/s, and no replay "
        "changed the totals.",
    ]

    def row(p: dict) -> list:
        return [
            MODES[p["mode"]],
            p["concurrency"],
            rate(p["events_per_s"]["median"]),
            ms(p["latency_ms"], 3),
            f"{p['events_per_call']:g}",
            _cpu(p["billing_cpu_ms_per_event"]),
            _cpu(p["client_cpu_ms_per_event"]),
        ]

    columns = [
        "delivery",
        "producers",
        "events/s",
        "ms to answer",
        "events per call",
        "billing CPU ms/event",
        "client CPU ms/event",
    ]
    order = {mode: i for i, mode in enumerate(MODES)}
    by_concurrency = sorted(remote, key=lambda p: (p["concurrency"], order[p["mode"]]))
    tables = [
        Table(
            "CPU per new event over gRPC, by how the events reach billing",
            columns,
            [row(p) for p in by_concurrency if p["phase"] == "record"],
            "Each producer sends an event and waits until billing has answered for it (the "
            "commit that holds it is durable) before the next. Billing CPU is the billing "
            "process's user+system time (/proc) over the pass, divided by its events; client "
            "CPU is this process's (producers, outbox, gRPC client). Medians over rounds; "
            "the modes ran interleaved.",
            text_columns=1,
        ),
        Table(
            "The same events again (replays): every one answered duplicate",
            columns,
            [row(p) for p in by_concurrency if p["phase"] == "replay"],
            "A replay is a primary-key conflict that writes nothing. After every replay the "
            "tenant's totals are compared with those before it: they never changed.",
            text_columns=1,
        ),
        Table(
            "The ledger in-process (a temporary file)",
            ["phase", "events x rounds", "events/s", "ms per call", "CPU ms/event"],
            [
                [
                    p["phase"],
                    f"{p['events_per_round']} x {p['rounds']}",
                    rate(p["events_per_s"]["median"]),
                    ms(p["latency_ms"], 3),
                    _cpu(p["cpu_ms_per_event"]),
                ]
                for p in local
            ],
            "Every commit is fsynced (WAL, synchronous=FULL): one per event when recorded "
            f"alone, one per {LOCAL_GROUP} events when grouped (`Ledger.record_many`).",
        ),
    ]
    return Report(
        service="billing",
        title="Billing: CPU per event, throughput and idempotent replays",
        summary=(
            "Usage events recorded over gRPC against a `python -m turnpike.billing` process by 1 to 32 "
            "concurrent producers, three ways: one `RecordUsage` call per event (billing "
            "group-commits what arrives together), the gateway's `BillingOutbox` sending one "
            "event per call (as before batches), and the outbox as it is (`RecordUsageBatch` "
            "for the events waiting together); then every event replayed once: replays must "
            "answer duplicate and leave `GetUsage` totals unchanged. And the ledger alone "
            "(`turnpike.billing.ledger.Ledger` on a temporary file)."
        ),
        params={
            "events_per_round": ctx.pick(1000, 100),
            "grpc_events_per_round": ctx.pick(2000, 64),
            "rounds": ctx.pick(3, 1),
            "concurrency": list(ctx.pick(CONCURRENCY, CONCURRENCY[:2])),
            "outbox_max_batch": MAX_BATCH,
            "in_process_events_per_commit": LOCAL_GROUP,
        },
        measurements=local + remote,
        derived=_derived(local, remote),
        headline=headline,
        tables=tables,
        duration_s=time.monotonic() - began,
    )
