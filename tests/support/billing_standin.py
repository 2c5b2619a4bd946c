"""A stand-in for the billing service, where a test needs an outbox but bills nothing
through the network: it records what it is sent."""

from __future__ import annotations

from turnpike.billing.v1 import billing_pb2
from turnpike.gateway.upstream.billing_outbox import BillingOutbox


class RecordingBilling:
    """Billing's two calls (``turnpike.gateway.upstream.billing_outbox.BillingRpc``), recording every event."""

    def __init__(self) -> None:
        self.events: list[billing_pb2.UsageEvent] = []

    async def RecordUsage(
        self, request: billing_pb2.UsageEvent, /, timeout: float | None = None
    ) -> billing_pb2.RecordUsageResponse:
        self.events.append(request)
        return billing_pb2.RecordUsageResponse()

    async def RecordUsageBatch(
        self, request: billing_pb2.RecordUsageBatchRequest, /, timeout: float | None = None
    ) -> billing_pb2.RecordUsageBatchResponse:
        self.events.extend(request.events)
        return billing_pb2.RecordUsageBatchResponse(duplicate=[False] * len(request.events))


def recording_outbox() -> BillingOutbox:
    """An outbox over ``RecordingBilling``, not started (it queues what it is given)."""
    return BillingOutbox(RecordingBilling())
