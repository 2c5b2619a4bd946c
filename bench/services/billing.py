"""Billing: ledger throughput (events/s) in-process and over gRPC with concurrent callers,
including idempotent replays of the same events (which must leave the totals unchanged)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from billing.ledger import Ledger, UsageEvent
from turnpike.billing.v1 import billing_pb2, billing_pb2_grpc
from turnpike.grpc_client import insecure_channel

from bench.services.common import Context, Report, Table, log, ms, rate, summarize

NEEDS = ("billing",)
TENANT = "bench"
MODELS = ("turnpike-sim", "turnpike-sim-65")
CONCURRENCY = (1, 8, 32)


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


def _point(transport: str, phase: str, concurrency: int, count: int, walls, latencies) -> dict:
    return {
        "transport": transport,
        "phase": phase,
        "concurrency": concurrency,
        "events_per_round": count,
        "rounds": len(walls),
        "events_per_s": summarize([count / w for w in walls], digits=1),
        "latency_ms": summarize(latencies, 1000, digits=3),
    }


def in_process(ctx: Context, folder: Path) -> list[dict]:
    count, rounds = ctx.pick(1000, 100), ctx.pick(3, 1)
    ledger = Ledger.open(folder / "ledger.sqlite3")
    walls: dict[str, list[float]] = {"record": [], "replay": []}
    latencies: dict[str, list[float]] = {"record": [], "replay": []}
    try:
        for r in range(rounds):
            batch = events(f"local{r}", count)
            for phase in ("record", "replay"):
                before = ledger.usage(TENANT)
                began = time.perf_counter()
                for event in batch:
                    start = time.perf_counter()
                    duplicate = ledger.record(event)
                    latencies[phase].append(time.perf_counter() - start)
                    if duplicate != (phase == "replay"):
                        raise TotalsChanged(f"{event.event_id}: duplicate={duplicate} on {phase}")
                walls[phase].append(time.perf_counter() - began)
                if phase == "replay" and ledger.usage(TENANT) != before:
                    raise TotalsChanged("an in-process replay changed the totals")
        if ledger.usage(TENANT).responses != count * rounds:
            raise TotalsChanged("the ledger does not hold every recorded event once")
    finally:
        ledger.close()
    points = [
        _point("in-process", phase, 1, count, walls[phase], latencies[phase])
        for phase in ("record", "replay")
    ]
    for p in points:
        log(
            f"billing in-process {p['phase']:6}: {rate(p['events_per_s']['median'])} events/s, "
            f"{ms(p['latency_ms'], 3)} ms per event"
        )
    return points


async def over_grpc(ctx: Context) -> list[dict]:
    count, rounds = ctx.pick(1000, 64), ctx.pick(3, 1)
    points = []
    recorded = 0
    async with insecure_channel(ctx.addresses["billing"]) as channel:
        stub = billing_pb2_grpc.BillingStub(channel)
        usage = billing_pb2.GetUsageRequest(tenant=TENANT)
        for concurrency in ctx.pick(CONCURRENCY, CONCURRENCY[:2]):
            walls: dict[str, list[float]] = {"record": [], "replay": []}
            latencies: dict[str, list[float]] = {"record": [], "replay": []}
            for r in range(rounds):
                batch = [
                    billing_pb2.UsageEvent(**vars(e)) for e in events(f"c{concurrency}r{r}", count)
                ]
                for phase in ("record", "replay"):
                    before = await stub.GetUsage(usage)
                    wall, lat, duplicates = await _send_all(stub, batch, concurrency)
                    walls[phase].append(wall)
                    latencies[phase] += lat
                    after = await stub.GetUsage(usage)
                    if duplicates != (len(batch) if phase == "replay" else 0):
                        raise TotalsChanged(f"{duplicates} duplicates on {phase} of {len(batch)}")
                    if phase == "record":
                        recorded += len(batch)
                        if after.responses != recorded:
                            raise TotalsChanged(f"{after.responses} billed, {recorded} sent")
                    elif after != before:
                        raise TotalsChanged("a replay over gRPC changed the totals")
            for phase in ("record", "replay"):
                points.append(
                    _point("grpc", phase, concurrency, count, walls[phase], latencies[phase])
                )
                p = points[-1]
                log(
                    f"billing grpc {phase:6} x{concurrency:<3}: "
                    f"{rate(p['events_per_s']['median'])} events/s, "
                    f"{ms(p['latency_ms'], 3)} ms per call"
                )
    return points


async def _send_all(
    stub: billing_pb2_grpc.BillingStub, batch: list, concurrency: int
) -> tuple[float, list[float], int]:
    """RecordUsage for every event, ``concurrency`` calls in flight; returns the wall time,
    the per-call latencies and how many calls answered duplicate."""
    queue = iter(batch)
    latencies: list[float] = []
    duplicates = 0

    async def caller() -> None:
        nonlocal duplicates
        for event in queue:  # shared iterator: each event is sent once
            start = time.perf_counter()
            reply = await stub.RecordUsage(event)
            latencies.append(time.perf_counter() - start)
            duplicates += reply.duplicate

    began = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return time.perf_counter() - began, latencies, duplicates


async def run(ctx: Context) -> Report:
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="turnpike-bench-ledger-") as folder:
        local = in_process(ctx, Path(folder))
    remote = await over_grpc(ctx)

    def best(points: list[dict], phase: str) -> float:
        return max(p["events_per_s"]["median"] for p in points if p["phase"] == phase)

    derived = {
        "in_process_record_events_per_s": local[0]["events_per_s"]["median"],
        "in_process_replay_events_per_s": local[1]["events_per_s"]["median"],
        "grpc_record_events_per_s_sequential": remote[0]["events_per_s"]["median"],
        "grpc_record_events_per_s_best": best(remote, "record"),
        "grpc_replay_events_per_s_best": best(remote, "replay"),
        "totals_unchanged_by_replays": True,  # checked after every replay (else it raises)
    }
    seq = remote[0]
    best_record = max(
        (p for p in remote if p["phase"] == "record"), key=lambda p: p["events_per_s"]["median"]
    )
    headline = [
        f"In-process: {rate(local[0]['events_per_s']['median'])} new events/s (an fsync "
        f"each), {rate(local[1]['events_per_s']['median'])} replays/s.",
        f"Over gRPC: {rate(seq['events_per_s']['median'])} events/s with one caller, "
        f"{rate(best_record['events_per_s']['median'])}/s with {best_record['concurrency']}; "
        f"replays up to {rate(derived['grpc_replay_events_per_s_best'])}/s, and no replay "
        "changed the totals.",
    ]
    rows = [
        [
            p["transport"].replace("grpc", "gRPC"),
            p["phase"],
            p["concurrency"],
            f"{p['events_per_round']} x {p['rounds']}",
            rate(p["events_per_s"]["median"]),
            ms(p["latency_ms"], 3),
        ]
        for p in local + remote
    ]
    table = Table(
        "Ledger throughput: new events (record) and the same events again (replay)",
        ["transport", "phase", "callers", "events x rounds", "events/s", "ms per event"],
        rows,
        "Every new event is its own SQLite transaction with an fsync (WAL, synchronous=FULL); "
        "a replay is a primary-key conflict that writes nothing. After every replay the "
        "tenant's totals are compared with those before it: they never changed.",
        text_columns=2,
    )
    return Report(
        service="billing",
        title="Billing: ledger throughput and idempotent replays",
        summary=(
            "Usage events recorded in-process (`billing.ledger.Ledger` on a temporary file) "
            "and over gRPC (`RecordUsage` against a `python -m billing` process, 1 to 32 "
            "concurrent callers on one channel), then every event replayed once: replays must "
            "answer duplicate and leave `GetUsage` totals unchanged."
        ),
        params={
            "events_per_round": ctx.pick(1000, 100),
            "grpc_events_per_round": ctx.pick(1000, 64),
            "rounds": ctx.pick(3, 1),
            "concurrency": list(ctx.pick(CONCURRENCY, CONCURRENCY[:2])),
        },
        measurements=local + remote,
        derived=derived,
        headline=headline,
        tables=[table],
        duration_s=time.monotonic() - began,
    )
