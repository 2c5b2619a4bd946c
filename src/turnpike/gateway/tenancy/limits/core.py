"""The arithmetic of admission, free of I/O: what the limiters share.

A limiter gathers what one tenant's limits hold right now (``Seen``: bucket levels
already refilled, the budget used, the responses in flight), and this module decides:
which limit refuses (``refusal``), when a retry can succeed, what the bucket levels are
after a reservation (``reserve``), and the ``x-ratelimit-*`` headers. ``LocalLimiter``
runs it on state in process; ``RedisLimiter``'s script makes the same checks in Redis and
hands back the levels it saw, from which this module builds the same answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from turnpike.gateway.tenancy.tenant_limits import TenantLimits, TokenBudget

# The reasons of a refusal, in the order they are reported when several limits refuse
# at once: a spent budget first (it is another error for the client), then the rates.
REASONS = ("budget", "requests", "tokens", "concurrency")
REFILL_WINDOW_S = 60.0  # a per-minute limit refills its whole capacity in a minute


def refill(level: float, updated: float, now: float, capacity: int) -> float:
    """A token bucket's level at ``now``: refilled at ``capacity`` per minute since
    ``updated``, never above ``capacity`` (below zero is debt, repaid by the refill)."""
    if now > updated:
        level += (now - updated) * capacity / REFILL_WINDOW_S
    return min(level, float(capacity))


def wait_for(level: float, need: float, capacity: int) -> float | None:
    """Seconds until a bucket at ``level`` holds ``need`` (None: never, a zero limit)."""
    if capacity <= 0:
        return None
    return max(0.0, (need - level) * REFILL_WINDOW_S / capacity)


def tokens_needed(estimate: int, capacity: int) -> int:
    """What the tokens bucket must hold to admit ``estimate``: the estimate, or a full
    bucket for a request larger than the whole per-minute limit (its reservation then
    puts the bucket into debt rather than refusing it forever)."""
    return min(estimate, capacity)


def budget_window(budget: TokenBudget, now: float) -> str:
    """The name of the budget period holding ``now`` (its kind and start, unix seconds)."""
    return f"{budget.period}:{int(budget.period_start(now))}"


@dataclass(frozen=True)
class Seen:
    """One tenant's limits as an admission finds them, before it reserves anything.

    None for a limit the tenant does not have."""

    now: float  # unix seconds: the budget's period is taken at this time
    requests: float | None = None  # the requests bucket's level
    tokens: float | None = None  # the tokens bucket's level (negative: in debt)
    budget_used: int | None = None  # tokens used or reserved in the budget period
    in_flight: int | None = None  # the tenant's responses in flight


def failures(limits: TenantLimits, estimate: int, seen: Seen) -> dict[str, float | None]:
    """Every limit that refuses, with the seconds until it would admit (None: not known
    from the limits alone), in the order of ``REASONS``."""
    found: dict[str, float | None] = {}
    budget = limits.token_budget
    if budget is not None and seen.budget_used is not None and seen.budget_used >= budget.tokens:
        found["budget"] = max(0.0, budget.period_end(seen.now) - seen.now)
    rpm = limits.requests_per_minute
    if rpm is not None and seen.requests is not None and (rpm <= 0 or seen.requests < 1):
        found["requests"] = wait_for(seen.requests, 1, rpm)
    tpm = limits.tokens_per_minute
    if tpm is not None and seen.tokens is not None:
        need = tokens_needed(estimate, tpm)
        if tpm <= 0 or seen.tokens < need:
            found["tokens"] = wait_for(seen.tokens, need, tpm)
    cap = limits.max_concurrent_responses
    if cap is not None and seen.in_flight is not None and seen.in_flight >= cap:
        found["concurrency"] = None  # a slot frees when one of its responses ends
    return found


def refusal(limits: TenantLimits, estimate: int, seen: Seen) -> str | None:
    """The reason to refuse (the first of ``REASONS`` that applies), or None to admit."""
    return next(iter(failures(limits, estimate, seen)), None)


def retry_after(found: dict[str, float | None]) -> float | None:
    """When a retry can succeed: once every refusing limit whose wait is known admits
    (None when none is known: a concurrency limit, a zero limit)."""
    waits = [wait for wait in found.values() if wait is not None]
    return max(waits) if waits else None


def reserve(limits: TenantLimits, estimate: int, seen: Seen) -> Seen:
    """The state after admitting: one request and ``estimate`` tokens taken from the
    buckets and the budget, one more response in flight."""
    return replace(
        seen,
        requests=None if seen.requests is None else seen.requests - 1,
        tokens=None if seen.tokens is None else seen.tokens - estimate,
        budget_used=None if seen.budget_used is None else seen.budget_used + estimate,
        in_flight=None if seen.in_flight is None else seen.in_flight + 1,
    )


def format_duration(seconds: float) -> str:
    """A duration as the OpenAI API writes its ``x-ratelimit-reset-*`` headers (Go's
    notation): ``20ms``, ``1s``, ``8.64s``, ``6m0s``, ``1h0m0s``; rounded up to the
    millisecond, so a client that waits that long finds the limit reset."""
    ms = max(0, math.ceil(seconds * 1000 - 1e-6))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    whole, fraction = divmod(ms, 1000)
    text = f"{whole}.{fraction:03d}".rstrip("0") if fraction else str(whole)
    if hours:
        return f"{hours}h{minutes}m{text}s"
    if minutes:
        return f"{minutes}m{text}s"
    return f"{text}s"


def _bucket_headers(kind: str, capacity: int, level: float) -> dict[str, str]:
    refill = wait_for(level, capacity, capacity)
    return {
        f"x-ratelimit-limit-{kind}": str(capacity),
        f"x-ratelimit-remaining-{kind}": str(max(0, math.floor(level))),
        f"x-ratelimit-reset-{kind}": format_duration(refill or 0.0),
    }


def headers(limits: TenantLimits, seen: Seen) -> dict[str, str]:
    """The ``x-ratelimit-*`` headers of the limits the tenant has: the limit, what
    remains now and how long until the bucket is full again."""
    found: dict[str, str] = {}
    if limits.requests_per_minute is not None and seen.requests is not None:
        found.update(_bucket_headers("requests", limits.requests_per_minute, seen.requests))
    if limits.tokens_per_minute is not None and seen.tokens is not None:
        found.update(_bucket_headers("tokens", limits.tokens_per_minute, seen.tokens))
    return found


# -- what admission hands out -----------------------------------------------------------


def new_slot_id() -> str:
    return uuid.uuid4().hex


@dataclass(eq=False)
class Ticket:
    """What an admitted request holds until ``Limiter.settle``: the tokens it reserved,
    the budget period they were charged to, and its response slot. Settling it once is
    what counts; later calls do nothing."""

    tenant: str
    issuer: str  # the kind of limiter that admitted it ("local", "redis"): it settles it
    reserved_tokens: int = 0  # charged to the tokens bucket and the budget at admission
    tokens_per_minute: int | None = None  # the tokens bucket's capacity (None: none charged)
    budget_window: str | None = None  # the budget period charged (None: no budget)
    slot: str | None = None  # the response slot taken (None: no concurrency limit)
    settled: bool = False

    def take(self) -> bool:
        """True the first time only: the caller settles it."""
        first, self.settled = not self.settled, True
        return first

    @property
    def charges(self) -> bool:
        """Whether settling it changes any state (unlimited tenants hold nothing)."""
        return (
            self.tokens_per_minute is not None
            or self.budget_window is not None
            or self.slot is not None
        )


@dataclass(eq=False)
class ConnectionSlot:
    """A WebSocket connection counted against its tenant's cap, until closed."""

    tenant: str
    issuer: str
    id: str | None = None  # None: the tenant has no cap, nothing is held
    closed: bool = False

    def take(self) -> bool:
        first, self.closed = not self.closed, True
        return first


@dataclass(frozen=True)
class Admission:
    allowed: bool
    reason: str | None  # one of REASONS when refused
    retry_after_s: float | None  # when a retry can succeed (budget: the period's end)
    headers: dict[str, str]  # x-ratelimit-* of the limits the tenant has
    ticket: Ticket | None  # for settle(), when allowed


def admitted(limits: TenantLimits, estimate: int, seen: Seen, ticket: Ticket) -> Admission:
    return Admission(True, None, None, headers(limits, reserve(limits, estimate, seen)), ticket)


def refused(limits: TenantLimits, estimate: int, seen: Seen, reason: str) -> Admission:
    return Admission(
        False, reason, retry_after(failures(limits, estimate, seen)), headers(limits, seen), None
    )


def new_ticket(issuer: str, tenant: str, limits: TenantLimits, estimate: int, now: float) -> Ticket:
    """The ticket of an admission of ``estimate`` tokens (its slot id fresh)."""
    budget = limits.token_budget
    charged = limits.tokens_per_minute is not None or budget is not None
    return Ticket(
        tenant,
        issuer,
        reserved_tokens=estimate if charged else 0,
        tokens_per_minute=limits.tokens_per_minute,
        budget_window=None if budget is None else budget_window(budget, now),
        slot=None if limits.max_concurrent_responses is None else new_slot_id(),
    )


def unlimited(limits: TenantLimits) -> bool:
    """Whether admission has nothing to check for these limits."""
    return (
        limits.requests_per_minute is None
        and limits.tokens_per_minute is None
        and limits.token_budget is None
        and limits.max_concurrent_responses is None
    )


class Limiter(Protocol):
    async def admit(self, tenant: str, limits: TenantLimits, estimated_tokens: int) -> Admission:
        """Check every limit at once; reserve only if all admit."""

    async def settle(self, ticket: Ticket, actual_tokens: int) -> None:
        """Charge the actual usage in place of the estimate; free the response slot.
        Idempotent."""

    async def open_connection(self, tenant: str, limits: TenantLimits) -> ConnectionSlot | None:
        """A slot for a WebSocket connection, or None when the tenant is at its cap."""

    async def close_connection(self, slot: ConnectionSlot) -> None:
        """Free the slot. Idempotent."""

    async def close(self) -> None:
        """Release connections and tasks (at shutdown)."""


Clock = Callable[[], float]


async def stop(task: asyncio.Task[None] | None) -> None:
    """Cancel a background task and wait until it has stopped."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
