"""``LocalLimiter``: the limits of one gateway process, in its memory.

For a gateway without Redis, and for ``FallbackLimiter`` while Redis is down. Every
operation runs without awaiting anything, so on the event loop it is atomic. The state
is a few numbers per configured tenant: buckets as (level, time of the level), the budget
of the current period, and the ids of the slots held.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from turnpike.gateway.tenancy.limits import core
from turnpike.gateway.tenancy.limits.core import Admission, Clock, ConnectionSlot, Seen, Ticket
from turnpike.gateway.tenancy.limits.metrics import count_refusal

if TYPE_CHECKING:
    from turnpike.gateway.tenancy.tenant_limits import TenantLimits

ISSUER = "local"


class LocalLimiter:
    def __init__(self, clock: Clock = time.time) -> None:
        self._clock = clock
        # (tenant, "requests" | "tokens") -> (level, when it was that)
        self._buckets: dict[tuple[str, str], tuple[float, float]] = {}
        # tenant -> (budget period, tokens used or reserved in it)
        self._budgets: dict[str, tuple[str, int]] = {}
        self._responses: dict[str, set[str]] = {}
        self._connections: dict[str, set[str]] = {}

    def _level(self, tenant: str, kind: str, capacity: int | None, now: float) -> float | None:
        if capacity is None:
            return None
        level, updated = self._buckets.get((tenant, kind), (capacity, now))
        return core.refill(level, updated, now, capacity)

    def _budget_used(self, tenant: str, window: str | None) -> int | None:
        if window is None:
            return None
        held, used = self._budgets.get(tenant, (window, 0))
        return used if held == window else 0

    def _seen(self, tenant: str, limits: TenantLimits, ticket: Ticket, now: float) -> Seen:
        responses = self._responses.get(tenant, ())
        return Seen(
            now,
            requests=self._level(tenant, "requests", limits.requests_per_minute, now),
            tokens=self._level(tenant, "tokens", limits.tokens_per_minute, now),
            budget_used=self._budget_used(tenant, ticket.budget_window),
            in_flight=None if limits.max_concurrent_responses is None else len(responses),
        )

    async def admit(self, tenant: str, limits: TenantLimits, estimated_tokens: int) -> Admission:
        estimate = max(0, int(estimated_tokens))
        now = self._clock()
        ticket = core.new_ticket(ISSUER, tenant, limits, estimate, now)
        seen = self._seen(tenant, limits, ticket, now)
        if reason := core.refusal(limits, estimate, seen):
            count_refusal(reason)
            return core.refused(limits, estimate, seen, reason)
        after = core.reserve(limits, estimate, seen)
        if after.requests is not None:
            self._buckets[tenant, "requests"] = (after.requests, now)
        if after.tokens is not None:
            self._buckets[tenant, "tokens"] = (after.tokens, now)
        if ticket.budget_window is not None and after.budget_used is not None:
            self._budgets[tenant] = (ticket.budget_window, after.budget_used)
        if ticket.slot is not None:
            self._responses.setdefault(tenant, set()).add(ticket.slot)
        return core.admitted(limits, estimate, seen, ticket)

    async def settle(self, ticket: Ticket, actual_tokens: int) -> None:
        if not ticket.take():
            return
        delta = max(0, int(actual_tokens)) - ticket.reserved_tokens
        tenant, now = ticket.tenant, self._clock()
        capacity = ticket.tokens_per_minute
        if capacity is not None and delta:
            level = self._level(tenant, "tokens", capacity, now)
            assert level is not None  # capacity is set
            self._buckets[tenant, "tokens"] = (min(float(capacity), level - delta), now)
        if ticket.budget_window is not None and delta:
            window, used = self._budgets.get(tenant, (None, 0))
            if window == ticket.budget_window:  # a period that has ended is left as it was
                self._budgets[tenant] = (window, used + delta)
        if ticket.slot is not None:
            _release(self._responses, tenant, ticket.slot)

    async def open_connection(self, tenant: str, limits: TenantLimits) -> ConnectionSlot | None:
        cap = limits.max_websocket_connections
        if cap is None:
            return ConnectionSlot(tenant, ISSUER)
        held = self._connections.setdefault(tenant, set())
        if len(held) >= cap:
            count_refusal("connections")
            return None
        slot_id = core.new_slot_id()
        slot = ConnectionSlot(tenant, ISSUER, slot_id)
        held.add(slot_id)
        return slot

    async def close_connection(self, slot: ConnectionSlot) -> None:
        if slot.take() and slot.id is not None:
            _release(self._connections, slot.tenant, slot.id)

    async def close(self) -> None:
        pass


def _release(held: dict[str, set[str]], tenant: str, slot: str) -> None:
    slots = held.get(tenant)
    if slots is not None:
        slots.discard(slot)
        if not slots:
            del held[tenant]
