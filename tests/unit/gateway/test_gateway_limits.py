"""The limiter's arithmetic on an injected clock (LocalLimiter): token buckets and their
refill, reservation and settlement (debt and refund), budget periods, concurrency and
connection caps, the x-ratelimit headers and retry_after; and FallbackLimiter, which
keeps serving on per-process limits while Redis refuses or says nothing."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime

import pytest
from support.limiter import ticket_of
from support.metric_samples import Delta, sample
from support.procs import free_port

from turnpike.gateway.tenancy.limits import (
    FallbackLimiter,
    LimiterUnavailable,
    LocalLimiter,
    RedisLimiter,
    format_duration,
)
from turnpike.gateway.tenancy.limits.core import ConnectionSlot, Ticket
from turnpike.gateway.tenancy.tenant_limits import TenantLimits, TokenBudget

NOON = datetime(2025, 3, 12, 12, 0, tzinfo=UTC).timestamp()  # a Wednesday


class Clock:
    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def limiter(clock: Clock) -> LocalLimiter:
    return LocalLimiter(clock)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (-1, "0s"),
        (0.02, "20ms"),
        (0.0201, "21ms"),
        (0.0004, "1ms"),
        (0.999, "999ms"),
        (1, "1s"),
        (8.64, "8.64s"),
        (59.5, "59.5s"),
        (60, "1m0s"),
        (360, "6m0s"),
        (96, "1m36s"),
        (3600, "1h0m0s"),
        (3723.25, "1h2m3.25s"),
    ],
)
def test_durations_are_written_as_the_openai_api_does(seconds, text):
    assert format_duration(seconds) == text


# -- requests per minute --------------------------------------------------------------------


async def test_a_full_minute_of_requests_then_a_refusal_until_the_bucket_refills(limiter, clock):
    limits = TenantLimits(requests_per_minute=60)
    first = await limiter.admit("a", limits, 0)
    assert first.allowed and first.reason is None and first.retry_after_s is None
    assert first.headers == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1s",
    }
    for _ in range(59):
        assert (await limiter.admit("a", limits, 0)).allowed
    refused = await limiter.admit("a", limits, 0)
    assert (refused.allowed, refused.reason, refused.ticket) == (False, "requests", None)
    assert refused.retry_after_s == pytest.approx(1.0)
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.headers["x-ratelimit-reset-requests"] == "1m0s"
    clock.advance(0.5)
    again = await limiter.admit("a", limits, 0)
    assert not again.allowed and again.retry_after_s == pytest.approx(0.5)
    clock.advance(0.5)
    assert (await limiter.admit("a", limits, 0)).allowed
    # Another tenant has a bucket of its own.
    assert (await limiter.admit("b", limits, 0)).allowed


async def test_the_bucket_refills_continuously_and_never_above_its_capacity(limiter, clock):
    limits = TenantLimits(requests_per_minute=6)  # one every 10 s
    for _ in range(6):
        assert (await limiter.admit("a", limits, 0)).allowed
    clock.advance(25)  # 2.5 requests back
    assert (await limiter.admit("a", limits, 0)).allowed
    assert (await limiter.admit("a", limits, 0)).allowed
    refused = await limiter.admit("a", limits, 0)
    assert refused.reason == "requests" and refused.retry_after_s == pytest.approx(5.0)
    clock.advance(3600)  # idle for an hour: a full bucket, no more
    allowed = await limiter.admit("a", limits, 0)
    assert allowed.headers["x-ratelimit-remaining-requests"] == "5"
    assert allowed.headers["x-ratelimit-reset-requests"] == "10s"


# -- tokens per minute: reservation and settlement ----------------------------------------


async def test_tokens_are_reserved_at_admission_and_the_unused_part_refunded(limiter, clock):
    limits = TenantLimits(tokens_per_minute=1000)
    first = await limiter.admit("a", limits, 600)
    assert first.headers == {
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "400",
        "x-ratelimit-reset-tokens": "36s",
    }
    refused = await limiter.admit("a", limits, 600)
    assert refused.reason == "tokens"
    assert refused.retry_after_s == pytest.approx(12.0)  # 200 tokens at 1000 a minute
    assert refused.headers["x-ratelimit-remaining-tokens"] == "400"
    await limiter.settle(first.ticket, 100)  # 500 back
    second = await limiter.admit("a", limits, 600)
    assert second.allowed
    assert second.headers["x-ratelimit-remaining-tokens"] == "300"


async def test_usage_over_the_estimate_puts_the_bucket_into_debt(limiter, clock):
    limits = TenantLimits(tokens_per_minute=1000)
    admission = await limiter.admit("a", limits, 100)
    await limiter.settle(admission.ticket, 1600)  # 1500 more than reserved: -600
    refused = await limiter.admit("a", limits, 0)
    assert refused.reason == "tokens"
    assert refused.retry_after_s == pytest.approx(36.0)  # the debt repaid first
    assert refused.headers["x-ratelimit-remaining-tokens"] == "0"
    assert refused.headers["x-ratelimit-reset-tokens"] == "1m36s"
    clock.advance(36)
    assert (await limiter.admit("a", limits, 0)).allowed


async def test_an_estimate_above_the_whole_limit_passes_on_a_full_bucket(limiter, clock):
    limits = TenantLimits(tokens_per_minute=1000)
    big = await limiter.admit("a", limits, 5000)
    assert big.allowed and big.headers["x-ratelimit-remaining-tokens"] == "0"
    refused = await limiter.admit("a", limits, 10)
    assert refused.retry_after_s == pytest.approx((4000 + 10) * 60 / 1000)
    await limiter.settle(big.ticket, 300)  # the debt refunded: 700 left
    assert (await limiter.admit("a", limits, 700)).allowed


async def test_a_refund_never_fills_the_bucket_above_its_capacity(limiter, clock):
    limits = TenantLimits(tokens_per_minute=1000)
    admission = await limiter.admit("a", limits, 800)
    clock.advance(120)
    await limiter.settle(admission.ticket, 0)
    assert (await limiter.admit("a", limits, 0)).headers["x-ratelimit-remaining-tokens"] == "1000"


async def test_settling_twice_charges_once(limiter, clock):
    limits = TenantLimits(tokens_per_minute=1000, max_concurrent_responses=1)
    admission = await limiter.admit("a", limits, 100)
    await limiter.settle(admission.ticket, 500)
    await limiter.settle(admission.ticket, 500)
    await limiter.settle(admission.ticket, 0)
    after = await limiter.admit("a", limits, 0)
    assert after.headers["x-ratelimit-remaining-tokens"] == "500"
    assert (await limiter.admit("a", limits, 0)).reason == "concurrency"


async def test_a_refusal_reserves_nothing(limiter, clock):
    limits = TenantLimits(requests_per_minute=10, tokens_per_minute=100)
    assert (await limiter.admit("a", limits, 80)).allowed
    refused = await limiter.admit("a", limits, 50)
    assert refused.reason == "tokens"
    assert refused.headers["x-ratelimit-remaining-requests"] == "9"
    assert refused.headers["x-ratelimit-remaining-tokens"] == "20"
    assert (await limiter.admit("a", limits, 20)).headers["x-ratelimit-remaining-requests"] == "8"


async def test_a_zero_limit_refuses_with_no_time_to_retry(limiter):
    refused = await limiter.admit("a", TenantLimits(tokens_per_minute=0), 0)
    assert (refused.reason, refused.retry_after_s) == ("tokens", None)
    refused = await limiter.admit("a", TenantLimits(requests_per_minute=0), 0)
    assert (refused.reason, refused.retry_after_s) == ("requests", None)


# -- budgets --------------------------------------------------------------------------------


async def test_a_spent_budget_refuses_until_the_period_ends(limiter, clock):
    limits = TenantLimits(token_budget=TokenBudget(1000, "day"))
    first = await limiter.admit("a", limits, 600)
    second = await limiter.admit("a", limits, 600)  # the budget not spent yet: admitted
    assert first.allowed and second.allowed
    assert first.headers == {}  # a budget has no x-ratelimit headers
    refused = await limiter.admit("a", limits, 1)
    assert (refused.allowed, refused.reason) == (False, "budget")
    assert refused.retry_after_s == pytest.approx(12 * 3600)  # to midnight UTC
    await limiter.settle(second.ticket, 100)  # 1200 reserved -> 700 used
    assert (await limiter.admit("a", limits, 300)).allowed
    assert (await limiter.admit("a", limits, 1)).reason == "budget"
    clock.advance(12 * 3600)  # a new day
    assert (await limiter.admit("a", limits, 900)).allowed


async def test_a_settlement_after_its_period_ended_leaves_the_new_period_alone(limiter, clock):
    limits = TenantLimits(token_budget=TokenBudget(1000, "hour"))
    clock.advance(59 * 60)
    late = await limiter.admit("a", limits, 100)
    clock.advance(120)  # the next hour
    fresh = await limiter.admit("a", limits, 900)
    await limiter.settle(late.ticket, 5000)
    assert (await limiter.admit("a", limits, 1)).allowed  # 900 < 1000
    await limiter.settle(fresh.ticket, 999)  # 999 + 1 = 1000: spent
    assert (await limiter.admit("a", limits, 1)).reason == "budget"


@pytest.mark.parametrize(
    ("period", "ends"),
    [
        ("hour", datetime(2025, 3, 12, 13, tzinfo=UTC)),
        ("day", datetime(2025, 3, 13, tzinfo=UTC)),
        ("week", datetime(2025, 3, 17, tzinfo=UTC)),
        ("month", datetime(2025, 4, 1, tzinfo=UTC)),
    ],
)
async def test_a_spent_budget_says_when_its_period_ends(limiter, clock, period, ends):
    limits = TenantLimits(token_budget=TokenBudget(10, period))
    assert (await limiter.admit("a", limits, 10)).allowed
    refused = await limiter.admit("a", limits, 0)
    assert refused.reason == "budget"
    assert refused.retry_after_s == pytest.approx(ends.timestamp() - NOON)


async def test_the_budget_is_reported_before_the_rates_and_retry_waits_for_all(limiter, clock):
    limits = TenantLimits(tokens_per_minute=100, token_budget=TokenBudget(100, "hour"))
    assert (await limiter.admit("a", limits, 100)).allowed
    refused = await limiter.admit("a", limits, 50)
    assert refused.reason == "budget"
    assert refused.retry_after_s == pytest.approx(3600)  # not the 30 s of the bucket
    assert refused.headers["x-ratelimit-remaining-tokens"] == "0"


# -- concurrency ----------------------------------------------------------------------------


async def test_responses_in_flight_are_capped_and_freed_by_settlement(limiter):
    limits = TenantLimits(max_concurrent_responses=2)
    one = await limiter.admit("a", limits, 0)
    two = await limiter.admit("a", limits, 0)
    refused = await limiter.admit("a", limits, 0)
    assert (refused.reason, refused.retry_after_s, refused.headers) == ("concurrency", None, {})
    assert (await limiter.admit("b", limits, 0)).allowed  # per tenant
    await limiter.settle(one.ticket, 0)
    three = await limiter.admit("a", limits, 0)
    assert three.allowed
    await limiter.settle(one.ticket, 0)  # again: frees nothing more
    assert (await limiter.admit("a", limits, 0)).reason == "concurrency"
    await limiter.settle(two.ticket, 0)
    await limiter.settle(three.ticket, 0)


async def test_websocket_connections_are_capped_per_tenant(limiter):
    limits = TenantLimits(max_websocket_connections=1)
    refusals = Delta("turnpike_gateway_rate_limited_total", reason="connections")
    slot = await limiter.open_connection("a", limits)
    assert isinstance(slot, ConnectionSlot)
    assert await limiter.open_connection("a", limits) is None
    assert await limiter.open_connection("b", limits) is not None
    await limiter.close_connection(slot)
    await limiter.close_connection(slot)
    again = await limiter.open_connection("a", limits)
    assert again is not None
    assert await limiter.open_connection("a", limits) is None
    assert refusals.change == 2
    uncapped = await limiter.open_connection("a", TenantLimits())
    assert uncapped is not None and uncapped.id is None
    await limiter.close_connection(uncapped)


async def test_a_tenant_without_limits_is_admitted_with_no_headers(limiter):
    admission = await limiter.admit("a", TenantLimits(), 10**9)
    assert (admission.allowed, admission.headers) == (True, {})
    assert isinstance(admission.ticket, Ticket) and not admission.ticket.charges
    await limiter.settle(admission.ticket, 10**9)


async def test_refusals_are_counted_by_reason(limiter):
    limits = TenantLimits(requests_per_minute=1)
    requests = Delta("turnpike_gateway_rate_limited_total", reason="requests")
    assert (await limiter.admit("a", limits, 0)).allowed
    assert not (await limiter.admit("a", limits, 0)).allowed
    assert not (await limiter.admit("a", limits, 0)).allowed
    assert requests.change == 2


# -- FallbackLimiter ------------------------------------------------------------------------


class Flaky:
    """A stand-in for RedisLimiter (its issuer, unavailable while ``down``), on a
    LocalLimiter of its own."""

    def __init__(self, clock: Clock) -> None:
        self.inner = LocalLimiter(clock)
        self.down = False
        self.settled: list[Ticket] = []
        self.forgotten: list[Ticket | ConnectionSlot] = []

    def _check(self) -> None:
        if self.down:
            raise LimiterUnavailable("redis admit failed: ConnectionError()")

    async def admit(self, tenant, limits, estimated_tokens):
        self._check()
        admission = await self.inner.admit(tenant, limits, estimated_tokens)
        if admission.ticket is not None:
            admission.ticket.issuer = "redis"
        return admission

    async def settle(self, ticket, actual_tokens):
        self._check()
        self.settled.append(ticket)

    async def open_connection(self, tenant, limits):
        self._check()
        slot = await self.inner.open_connection(tenant, limits)
        if slot is not None:
            slot.issuer = "redis"
        return slot

    async def close_connection(self, slot):
        self._check()

    def forget(self, held):
        self.forgotten.append(held)

    async def ping(self):
        return not self.down

    async def close(self):
        pass


async def test_fallback_switches_to_local_limits_and_back_and_settles_with_the_issuer(
    clock, caplog
):
    primary = Flaky(clock)
    local = LocalLimiter(clock)
    fallbacks = Delta("turnpike_gateway_limiter_fallbacks_total")
    limiter = FallbackLimiter(primary, local, retry_s=0.05)
    limits = TenantLimits(requests_per_minute=100, max_concurrent_responses=10)
    from_redis = ticket_of(await limiter.admit("a", limits, 0))
    assert from_redis.issuer == "redis"
    assert not limiter.degraded and sample("turnpike_gateway_limiter_degraded") == 0

    primary.down = True
    with caplog.at_level(logging.WARNING, logger="turnpike.gateway.tenancy.limits"):
        local_tickets = [ticket_of(await limiter.admit("a", limits, 0)) for _ in range(5)]
    assert {t.issuer for t in local_tickets} == {"local"}
    assert limiter.degraded and sample("turnpike_gateway_limiter_degraded") == 1
    assert fallbacks.change == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "per process" in warnings[0].getMessage()
    # The Redis ticket is not sent to a Redis known to be down: its lease will end.
    await limiter.settle(from_redis, 0)
    assert primary.forgotten == [from_redis] and primary.settled == []

    primary.down = False
    for _ in range(100):
        if not limiter.degraded:
            break
        await asyncio.sleep(0.01)
    assert not limiter.degraded and sample("turnpike_gateway_limiter_degraded") == 0
    assert ticket_of(await limiter.admit("a", limits, 0)).issuer == "redis"
    # Tickets taken locally are settled locally: the local slots free up.
    for ticket in local_tickets:
        await limiter.settle(ticket, 0)
    assert primary.settled == []
    assert (await local.admit("a", TenantLimits(max_concurrent_responses=1), 0)).allowed
    assert fallbacks.change == 1
    await limiter.close()


async def test_fallback_connections_close_where_they_were_opened(clock):
    primary = Flaky(clock)
    limiter = FallbackLimiter(primary, LocalLimiter(clock), retry_s=60)
    limits = TenantLimits(max_websocket_connections=1)
    shared = await limiter.open_connection("a", limits)
    primary.down = True
    local = await limiter.open_connection("a", limits)  # the local count starts empty
    assert shared is not None and local is not None
    assert (shared.issuer, local.issuer) == ("redis", "local")
    assert await limiter.open_connection("a", limits) is None
    await limiter.close_connection(local)
    await limiter.close_connection(shared)
    assert primary.forgotten == [shared]
    assert await limiter.open_connection("a", limits) is not None
    await limiter.close()


async def test_a_redis_that_refuses_connections_does_not_stop_serving(clock, caplog):
    redis = RedisLimiter(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    limiter = FallbackLimiter(redis, LocalLimiter(clock), retry_s=60)
    fallbacks = Delta("turnpike_gateway_limiter_fallbacks_total")
    limits = TenantLimits(requests_per_minute=3, max_concurrent_responses=5)
    begin = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="turnpike.gateway.tenancy.limits"):
        answers = [await limiter.admit("a", limits, 0) for _ in range(4)]
    assert time.monotonic() - begin < 1.0
    assert [a.allowed for a in answers] == [True, True, True, False]  # held in process
    assert answers[3].reason == "requests"
    assert fallbacks.change == 1 and limiter.degraded
    assert sum("Redis unreachable" in r.getMessage() for r in caplog.records) == 1
    for answer in answers[:3]:
        await limiter.settle(ticket_of(answer), 0)
    slot = await limiter.open_connection("a", TenantLimits(max_websocket_connections=1))
    assert slot is not None and slot.issuer == "local"
    await limiter.close_connection(slot)
    await limiter.close()


async def test_a_redis_that_never_answers_costs_one_timeout_then_nothing(clock):
    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # takes everything, answers nothing
        writer.close()

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    redis = RedisLimiter(f"redis://127.0.0.1:{port}/0", timeout_s=0.2)
    limiter = FallbackLimiter(redis, LocalLimiter(clock), retry_s=60)
    limits = TenantLimits(requests_per_minute=10)
    begin = time.monotonic()
    assert (await limiter.admit("a", limits, 0)).allowed
    first = time.monotonic() - begin
    assert 0.15 < first < 0.6
    begin = time.monotonic()
    for _ in range(5):
        assert (await limiter.admit("a", limits, 0)).allowed
    assert time.monotonic() - begin < 0.05  # no request waits on a Redis known to be down
    await limiter.close()
    server.close()
    await server.wait_closed()
