"""The billing outbox: at-least-once delivery with a bounded queue, in batches."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.spans import attributes

from turnpike.billing.ledger import Ledger
from turnpike.billing.server import event_from_pb
from turnpike.billing.v1 import billing_pb2
from turnpike.gateway.upstream import billing_outbox
from turnpike.gateway.upstream.billing_outbox import BillingOutbox


def rpc_error(code: grpc.StatusCode) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), code.name)


class Billing:
    """A billing stub that is down until ``up`` is set, then records every event. ``calls``
    lists each call's event ids, whether it failed or not; ``called`` is set by the first."""

    def __init__(self, up: bool = False) -> None:
        self.up = asyncio.Event()
        if up:
            self.up.set()
        self.called = asyncio.Event()
        self.calls: list[list[str]] = []
        self.recorded: list[str] = []

    async def RecordUsage(self, event, timeout=None):
        await self._record([event])
        return billing_pb2.RecordUsageResponse()

    async def RecordUsageBatch(self, request, timeout=None):
        await self._record(request.events)
        return billing_pb2.RecordUsageBatchResponse(duplicate=[False] * len(request.events))

    async def _record(self, events) -> None:
        self.calls.append([e.event_id for e in events])
        self.called.set()
        if not self.up.is_set():
            raise rpc_error(grpc.StatusCode.UNAVAILABLE)
        self.recorded += [e.event_id for e in events]


class SlowBilling(Billing):
    """Up, but each call waits for ``release``: events arriving meanwhile queue up."""

    def __init__(self) -> None:
        super().__init__(up=True)
        self.release = asyncio.Event()

    async def _record(self, events) -> None:
        self.calls.append([e.event_id for e in events])
        self.called.set()
        await self.release.wait()
        self.recorded += [e.event_id for e in events]


def usage(n: int, tenant: str = "dev") -> billing_pb2.UsageEvent:
    return billing_pb2.UsageEvent(event_id=f"resp_{n}", tenant=tenant)


async def test_a_full_outbox_holds_the_next_record_back_instead_of_dropping_it() -> None:
    billing = Billing()
    outbox = BillingOutbox(billing, max_events=2, max_backoff_s=0.01)
    outbox.start()
    await outbox.submit(usage(1))
    await billing.called.wait()  # taken by the delivery loop, retried while down
    await outbox.submit(usage(2))
    await outbox.submit(usage(3))
    assert outbox.pending == 2
    fourth = asyncio.create_task(outbox.submit(usage(4)))
    await asyncio.sleep(0.05)
    assert not fourth.done() and outbox.pending == 2  # bounded: it waits for room
    billing.up.set()
    await asyncio.wait_for(fourth, 5)
    await outbox.close(timeout=5)
    assert billing.recorded == ["resp_1", "resp_2", "resp_3", "resp_4"]


async def test_a_record_billing_refuses_on_the_request_path_is_queued() -> None:
    billing = Billing()
    outbox = BillingOutbox(billing, max_backoff_s=0.01)
    outbox.start()
    await outbox.record_now(usage(1))
    assert billing.recorded == [] and outbox.pending + outbox.delivered <= 1
    billing.up.set()
    await outbox.close(timeout=5)
    assert billing.recorded == ["resp_1"] and outbox.delivered == 1


async def test_events_waiting_behind_a_call_go_together_in_batches_of_at_most_max_batch():
    billing = SlowBilling()
    outbox = BillingOutbox(billing, max_batch=3)
    outbox.start()
    await outbox.submit(usage(0))
    await billing.called.wait()  # a lone event goes at once, alone
    for n in range(1, 6):
        await outbox.submit(usage(n))
    billing.release.set()
    await outbox.close(timeout=5)
    assert billing.calls == [["resp_0"], ["resp_1", "resp_2", "resp_3"], ["resp_4", "resp_5"]]
    assert billing.recorded == [f"resp_{n}" for n in range(6)] and outbox.delivered == 6


class LostAcks:
    """Billing over a real ledger whose first ``lost`` acknowledgements never arrive: the
    batch is committed, but the gateway sees the call fail."""

    def __init__(self, ledger: Ledger, lost: int) -> None:
        self.ledger = ledger
        self.lost = lost
        self.calls: list[list[str]] = []

    async def RecordUsage(self, event, timeout=None):
        [duplicate] = self._record([event])
        return billing_pb2.RecordUsageResponse(duplicate=duplicate)

    async def RecordUsageBatch(self, request, timeout=None):
        return billing_pb2.RecordUsageBatchResponse(duplicate=self._record(request.events))

    def _record(self, events) -> list[bool]:
        self.calls.append([e.event_id for e in events])
        duplicates = self.ledger.record_many([event_from_pb(e) for e in events])
        if self.lost:
            self.lost -= 1
            raise rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED)
        return duplicates


async def test_a_failed_batch_is_retried_whole_and_billed_once(tmp_path: Path) -> None:
    ledger = Ledger.open(tmp_path / "ledger.sqlite3")
    try:
        billing = LostAcks(ledger, lost=2)
        outbox = BillingOutbox(billing, max_backoff_s=0.01)
        for n in range(10):  # queued before delivery starts: one batch
            await outbox.submit(
                billing_pb2.UsageEvent(
                    event_id=f"resp_{n}", tenant="dev", model="m", input_tokens=n, output_tokens=1
                )
            )
        outbox.start()
        await outbox.close(timeout=5)
        ids = [f"resp_{n}" for n in range(10)]
        assert billing.calls == [ids, ids, ids]  # the same batch, three attempts
        assert outbox.delivered == 10
        totals = ledger.usage("dev")
        assert (totals.responses, totals.input_tokens, totals.output_tokens) == (10, 45, 10)
    finally:
        ledger.close()


class OlderBilling(Billing):
    """A billing from before RecordUsageBatch."""

    async def RecordUsageBatch(self, request, timeout=None):
        self.calls.append([e.event_id for e in request.events])
        raise rpc_error(grpc.StatusCode.UNIMPLEMENTED)


async def test_an_older_billing_gets_one_call_per_event() -> None:
    billing = OlderBilling(up=True)
    outbox = BillingOutbox(billing, max_batch=3)
    for n in range(5):
        await outbox.submit(usage(n))
    outbox.start()
    await outbox.close(timeout=5)
    ids = [f"resp_{n}" for n in range(5)]
    # One refused batch, then single calls only (the next batch's events too).
    assert billing.calls == [ids[:3], *([i] for i in ids)]
    assert billing.recorded == ids and outbox.delivered == 5


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """The outbox's spans, from a local tracer provider (the global one stays untouched)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(billing_outbox, "tracer", provider.get_tracer("test"))
    return exporter


async def test_a_batch_delivery_is_one_new_trace_linked_to_every_response_it_bills(
    spans: InMemorySpanExporter,
) -> None:
    tracer = billing_outbox.tracer
    billing = Billing()
    outbox = BillingOutbox(billing, max_backoff_s=0.01)
    responses = []
    for n in range(3):
        with tracer.start_as_current_span("response.create") as response:
            await outbox.submit(usage(n))
        responses.append(response.get_span_context())
    await outbox.submit(usage(3))  # no span is current: nothing to link
    outbox.start()
    await billing.called.wait()  # the first attempt failed
    billing.up.set()
    await outbox.close(timeout=5)
    deliveries = [s for s in spans.get_finished_spans() if s.name == "billing.deliver_usage"]
    assert [attributes(s)["turnpike.attempt"] for s in deliveries] == [1, 2]
    for span in deliveries:
        assert span.parent is None
        assert span.context.trace_id not in {r.trace_id for r in responses}
        assert [link.context for link in span.links] == responses
        assert attributes(span)["turnpike.billing.events"] == 4
        assert list(attributes(span)["turnpike.billing.event_ids"]) == [
            f"resp_{n}" for n in range(4)
        ]


class Faulty(Billing):
    """Up, but its first call fails with ``error`` (anything, not only a gRPC status)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(up=True)
        self.error: Exception | None = error

    async def _record(self, events) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            self.calls.append([e.event_id for e in events])
            raise error
        await super()._record(events)


async def test_an_unexpected_failure_is_retried_and_the_loop_lives_on() -> None:
    """Not only gRPC errors: a closed channel raises something else, and the delivery
    loop must not die of it (the queue would fill and every response would wait)."""
    billing = Faulty(RuntimeError("channel closed"))
    outbox = BillingOutbox(billing, max_backoff_s=0.01)
    outbox.start()
    await outbox.submit(usage(1))
    await outbox.submit(usage(2))
    await outbox.close(timeout=5)
    assert billing.recorded == ["resp_1", "resp_2"]


class Rejecting(Billing):
    """Up, and refuses (INVALID_ARGUMENT) any call that holds the event ``bad``."""

    def __init__(self, bad: str) -> None:
        super().__init__(up=True)
        self.bad = bad

    async def _record(self, events) -> None:
        if any(e.event_id == self.bad for e in events):
            self.calls.append([e.event_id for e in events])
            raise rpc_error(grpc.StatusCode.INVALID_ARGUMENT)
        await super()._record(events)


async def test_an_event_billing_refuses_is_set_aside_and_the_rest_are_billed(caplog) -> None:
    """Billing refuses an event it can never record: retrying it forever would hold up
    every event behind it. The batch is split to find it; it alone is set aside, logged
    in full, and counted."""
    billing = Rejecting(bad="resp_2")
    outbox = BillingOutbox(billing, max_backoff_s=0.01)
    for n in (1, 2, 3):  # queued before the loop starts: one batch of three
        await outbox.submit(usage(n))
    outbox.start()
    await outbox.close(timeout=5)
    assert sorted(billing.recorded) == ["resp_1", "resp_3"]
    assert outbox.rejected == 1 and outbox.delivered == 2
    assert any("resp_2" in r.getMessage() and r.levelname == "ERROR" for r in caplog.records)


async def test_pending_events_are_counted_per_tenant() -> None:
    """/v1/usage reports a tenant's own events waiting for billing, never another's."""
    billing = Billing()
    outbox = BillingOutbox(billing, max_backoff_s=0.01)
    outbox.start()
    for n in range(3):
        await outbox.submit(billing_pb2.UsageEvent(event_id=f"resp_a{n}", tenant="alice"))
    await outbox.submit(billing_pb2.UsageEvent(event_id="resp_b", tenant="bob"))
    await billing.called.wait()  # one is being delivered (and retried): still pending
    assert (outbox.pending_for("alice"), outbox.pending_for("bob")) == (3, 1)
    assert outbox.pending_for("carol") == 0
    billing.up.set()
    await outbox.close(timeout=5)
    assert (outbox.pending_for("alice"), outbox.pending_for("bob")) == (0, 0)
