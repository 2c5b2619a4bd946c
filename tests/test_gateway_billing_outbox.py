"""The billing outbox: at-least-once delivery with a bounded queue."""

from __future__ import annotations

import asyncio

import grpc
from gateway.billing_outbox import BillingOutbox
from turnpike.billing.v1 import billing_pb2


class Billing:
    """A billing stub that is down until ``up`` is set, then records every event."""

    def __init__(self) -> None:
        self.up = asyncio.Event()
        self.recorded: list[str] = []

    async def RecordUsage(self, event, timeout=None):
        if not self.up.is_set():
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "down"
            )
        self.recorded.append(event.event_id)
        return billing_pb2.RecordUsageResponse()


def usage(n: int) -> billing_pb2.UsageEvent:
    return billing_pb2.UsageEvent(event_id=f"resp_{n}", tenant="dev")


async def test_a_full_outbox_holds_the_next_record_back_instead_of_dropping_it() -> None:
    billing = Billing()
    outbox = BillingOutbox(billing, max_events=2, max_backoff_s=0.01)
    outbox.start()
    await outbox.submit(usage(1))  # taken by the delivery loop, retried while billing is down
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
