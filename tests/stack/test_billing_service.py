"""The billing service as a real process over gRPC: idempotency, crash safety, clean stop; and
in process, the metrics of what it records and commits."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path

import grpc
import pytest
from support.metric_samples import Delta
from support.procs import free_port, start_service

from turnpike.billing.server import MAX_BATCH_EVENTS, BillingServicer, LedgerThread
from turnpike.billing.v1 import billing_pb2, billing_pb2_grpc
from turnpike.gateway.upstream.billing_outbox import BillingOutbox
from turnpike.grpc_client import insecure_channel, wait_healthy

SERVICE = "turnpike.billing.v1.Billing"


class Billing:
    """One billing process on a ledger file, restartable on the same file."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    async def start(self) -> None:
        self.proc = start_service(
            "billing",
            {"TURNPIKE_BILLING_PORT": str(self.port), "TURNPIKE_BILLING_LEDGER": str(self.ledger)},
        )
        if not await wait_healthy(self.address, timeout=20.0, service=SERVICE):
            self.stop_hard()
            pytest.fail("billing did not become healthy")

    def stop_hard(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def billing(tmp_path: Path) -> Iterator[Billing]:
    svc = Billing(tmp_path / "var" / "ledger.sqlite3")
    yield svc
    svc.stop_hard()


@pytest.fixture
async def stub(billing: Billing) -> AsyncIterator[billing_pb2_grpc.BillingStub]:
    await billing.start()
    async with insecure_channel(billing.address) as channel:
        yield billing_pb2_grpc.BillingStub(channel)


def usage_event(event_id: str, tenant: str = "acme", model: str = "m1") -> billing_pb2.UsageEvent:
    return billing_pb2.UsageEvent(
        event_id=event_id,
        tenant=tenant,
        model=model,
        input_tokens=100,
        cached_tokens=25,
        output_tokens=7,
        created_at=1_700_000_000,
    )


async def test_record_replay_and_totals(stub: billing_pb2_grpc.BillingStub) -> None:
    first = await stub.RecordUsage(usage_event("resp_a"))
    assert first.duplicate is False
    replay = await stub.RecordUsage(usage_event("resp_a"))
    assert replay.duplicate is True
    await stub.RecordUsage(usage_event("resp_b", model="m2"))
    await stub.RecordUsage(usage_event("resp_c", tenant="globex"))

    totals = await stub.GetUsage(billing_pb2.GetUsageRequest(tenant="acme"))
    assert totals.tenant == "acme"
    assert (totals.responses, totals.input_tokens, totals.cached_tokens, totals.output_tokens) == (
        2,
        200,
        50,
        14,
    )
    assert [(m.model, m.responses, m.input_tokens) for m in totals.by_model] == [
        ("m1", 1, 100),
        ("m2", 1, 100),
    ]

    unknown = await stub.GetUsage(billing_pb2.GetUsageRequest(tenant="nobody"))
    assert unknown.responses == 0
    assert list(unknown.by_model) == []


async def test_concurrent_deliveries_are_billed_once(stub: billing_pb2_grpc.BillingStub) -> None:
    # 50 distinct events, each delivered 4 times at once.
    ids = [f"resp_{i}" for i in range(50)] * 4
    replies = await asyncio.gather(*(stub.RecordUsage(usage_event(i)) for i in ids))
    assert sum(not r.duplicate for r in replies) == 50
    totals = await stub.GetUsage(billing_pb2.GetUsageRequest(tenant="acme"))
    assert totals.responses == 50
    assert totals.input_tokens == 50 * 100


async def test_a_batch_is_recorded_in_one_call_with_a_duplicate_flag_per_event(
    stub: billing_pb2_grpc.BillingStub,
) -> None:
    await stub.RecordUsage(usage_event("resp_a"))
    batch = [usage_event(i) for i in ("resp_a", "resp_b", "resp_c", "resp_b")]
    reply = await stub.RecordUsageBatch(billing_pb2.RecordUsageBatchRequest(events=batch))
    assert list(reply.duplicate) == [True, False, False, True]
    again = await stub.RecordUsageBatch(billing_pb2.RecordUsageBatchRequest(events=batch))
    assert list(again.duplicate) == [True] * 4
    empty = await stub.RecordUsageBatch(billing_pb2.RecordUsageBatchRequest())
    assert list(empty.duplicate) == []
    totals = await stub.GetUsage(billing_pb2.GetUsageRequest(tenant="acme"))
    assert (totals.responses, totals.input_tokens) == (3, 300)


async def test_single_and_batch_calls_at_once_are_billed_once(
    stub: billing_pb2_grpc.BillingStub,
) -> None:
    ids = [f"resp_{i}" for i in range(60)]
    batches = [ids[i : i + 7] for i in range(0, 60, 7)]
    calls = [stub.RecordUsage(usage_event(i)) for i in ids] + [
        stub.RecordUsageBatch(
            billing_pb2.RecordUsageBatchRequest(events=[usage_event(i) for i in batch])
        )
        for batch in batches
    ]
    replies = await asyncio.gather(*calls)
    singles, batched = replies[: len(ids)], replies[len(ids) :]
    fresh = sum(not r.duplicate for r in singles)
    fresh += sum(not d for r in batched for d in r.duplicate)
    assert fresh == 60
    totals = await stub.GetUsage(billing_pb2.GetUsageRequest(tenant="acme"))
    assert (totals.responses, totals.input_tokens) == (60, 6000)


async def test_a_batch_with_an_invalid_event_records_none(
    stub: billing_pb2_grpc.BillingStub,
) -> None:
    batch = [usage_event("resp_1"), billing_pb2.UsageEvent(event_id="r", tenant="acme")]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.RecordUsageBatch(billing_pb2.RecordUsageBatchRequest(events=batch))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details() == "events[1]: model must not be empty"
    too_many = [usage_event(f"resp_{i}") for i in range(1001)]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.RecordUsageBatch(billing_pb2.RecordUsageBatchRequest(events=too_many))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    totals = await stub.GetUsage(billing_pb2.GetUsageRequest(tenant="acme"))
    assert totals.responses == 0


@pytest.mark.parametrize(
    "bad",
    [
        billing_pb2.UsageEvent(tenant="acme", model="m1"),
        billing_pb2.UsageEvent(event_id="r", model="m1"),
        billing_pb2.UsageEvent(event_id="r", tenant="acme"),
        billing_pb2.UsageEvent(event_id="r", tenant="acme", model="m1", input_tokens=-1),
        billing_pb2.UsageEvent(event_id="r", tenant="acme", model="m1", output_tokens=-5),
    ],
)
async def test_invalid_events_are_invalid_argument(
    stub: billing_pb2_grpc.BillingStub, bad: billing_pb2.UsageEvent
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.RecordUsage(bad)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetUsage(billing_pb2.GetUsageRequest(tenant=""))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_acknowledged_events_survive_kill_9(billing: Billing) -> None:
    await billing.start()
    async with insecure_channel(billing.address) as channel:
        stub = billing_pb2_grpc.BillingStub(channel)
        for i in range(20):
            reply = await stub.RecordUsage(usage_event(f"resp_{i}", model=f"m{i % 2}"))
            assert reply.duplicate is False
    assert billing.proc is not None
    billing.proc.send_signal(signal.SIGKILL)
    assert billing.proc.wait(timeout=10) == -signal.SIGKILL

    await billing.start()
    async with insecure_channel(billing.address) as channel:
        stub = billing_pb2_grpc.BillingStub(channel)
        totals = await stub.GetUsage(billing_pb2.GetUsageRequest(tenant="acme"))
        assert totals.responses == 20
        assert totals.input_tokens == 20 * 100
        assert [(m.model, m.responses) for m in totals.by_model] == [("m0", 10), ("m1", 10)]
        # Redelivery after the crash is still recognised.
        assert (await stub.RecordUsage(usage_event("resp_3"))).duplicate is True


async def test_the_outbox_loses_and_doubles_nothing_across_a_kill_9_mid_run(
    billing: Billing,
) -> None:
    """The gateway's outbox delivers in batches while billing is killed and restarted."""
    await billing.start()
    async with insecure_channel(billing.address) as channel:
        outbox = BillingOutbox(
            billing_pb2_grpc.BillingStub(channel), timeout_s=1.0, max_backoff_s=0.2
        )
        outbox.start()
        restart = None
        for i in range(300):
            await outbox.submit(usage_event(f"resp_{i}", model=f"m{i % 3}"))
            if i % 10 == 9:
                await asyncio.sleep(0.005)  # a steady trickle, some batches in flight
            if i == 100:
                assert billing.proc is not None
                billing.proc.send_signal(signal.SIGKILL)
                billing.proc.wait(timeout=10)
                restart = asyncio.create_task(billing.start())  # meanwhile events queue up
        assert restart is not None
        await restart
        await outbox.close(timeout=30)
        assert outbox.pending == 0 and outbox.delivered == 300
        stub = billing_pb2_grpc.BillingStub(channel)
        totals = await stub.GetUsage(billing_pb2.GetUsageRequest(tenant="acme"))
    assert (totals.responses, totals.input_tokens, totals.output_tokens) == (300, 30000, 2100)
    assert [(m.model, m.responses) for m in totals.by_model] == [
        ("m0", 100),
        ("m1", 100),
        ("m2", 100),
    ]


async def test_sigterm_exits_cleanly_and_checkpoints(billing: Billing) -> None:
    await billing.start()
    async with insecure_channel(billing.address) as channel:
        stub = billing_pb2_grpc.BillingStub(channel)
        await stub.RecordUsage(usage_event("resp_x"))
    assert billing.proc is not None
    wal = billing.ledger.with_name(billing.ledger.name + "-wal")
    # A second connection keeps SQLite from checkpointing implicitly when the service's
    # connection goes away, so an empty WAL proves the shutdown hook checkpointed.
    with closing(sqlite3.connect(billing.ledger)) as other:
        other.execute("SELECT COUNT(*) FROM usage_events").fetchone()
        assert wal.stat().st_size > 0
        billing.proc.send_signal(signal.SIGTERM)
        assert billing.proc.wait(timeout=10) == 0
        assert wal.stat().st_size == 0
        assert other.execute("SELECT event_id FROM usage_events").fetchall() == [("resp_x",)]


class Aborted(Exception):
    """What the in-process servicer's ``context.abort`` raises."""


class AbortingContext:
    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise Aborted(code, details)


async def test_recorded_replayed_rejected_events_and_commits_are_counted(tmp_path: Path) -> None:
    ledger = LedgerThread(tmp_path / "ledger.sqlite3")
    servicer, context = BillingServicer(ledger), AbortingContext()
    recorded = Delta("turnpike_billing_events_recorded_total")
    ignored = Delta("turnpike_billing_duplicates_ignored_total")
    rejected = Delta("turnpike_billing_events_rejected_total")
    commits = Delta("turnpike_billing_commit_batch_size_count")
    committed = Delta("turnpike_billing_commit_batch_size_sum")
    timed = Delta("turnpike_billing_commit_seconds_count")

    def batch(*ids: str) -> billing_pb2.RecordUsageBatchRequest:
        return billing_pb2.RecordUsageBatchRequest(events=[usage_event(i) for i in ids])

    try:
        await servicer.RecordUsage(usage_event("m_a"), context)
        reply = await servicer.RecordUsageBatch(batch("m_a", "m_b", "m_c"), context)
        assert list(reply.duplicate) == [True, False, False]
        assert (recorded.change, ignored.change) == (3, 1)
        assert (commits.change, committed.change, timed.change) == (2, 4, 2)

        # Calls that arrive together share one commit.
        await asyncio.gather(
            *(servicer.RecordUsage(usage_event(f"m_g{i}"), context) for i in range(6))
        )
        assert recorded.change == 9 and committed.change == 10 and commits.change == 3

        # An invalid event refuses its whole call; so does a batch over the limit.
        invalid = batch("m_d", "m_e")
        invalid.events[1].input_tokens = -1
        with pytest.raises(Aborted):
            await servicer.RecordUsageBatch(invalid, context)
        with pytest.raises(Aborted):
            await servicer.RecordUsageBatch(batch(*["m_f"] * (MAX_BATCH_EVENTS + 1)), context)
        assert rejected.change == 2 + MAX_BATCH_EVENTS + 1
        assert recorded.change == 9 and committed.change == 10
    finally:
        await ledger.close()
