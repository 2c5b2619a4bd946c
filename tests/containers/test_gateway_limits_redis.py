"""RedisLimiter on a real redis-server: two limiters (as two gateway processes) share a
tenant's limits exactly, every key expires so an idle tenant leaves nothing behind, the
slot of a holder that died frees itself when its lease ends, and FallbackLimiter keeps
serving when Redis is stopped mid-run, then shares the limits again once it is back.

The limiters here wait longer for Redis than the gateway's default (0.2 s): on a busy
machine a cold burst of connections can take longer, and these tests are about sharing
and leases, not about how long to wait (tests/unit/gateway/test_gateway_limits.py times that)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from redis import asyncio as aioredis
from redis.exceptions import RedisError
from support.limiter import ticket_of
from support.metric_samples import Delta

from turnpike.gateway.tenancy.limits import FallbackLimiter, RedisLimiter
from turnpike.gateway.tenancy.tenant_limits import TenantLimits, TokenBudget


@pytest.fixture
def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"  # a tenant of its own: the Redis is shared


@pytest.fixture
async def redis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def pair(redis_url: str) -> AsyncIterator[tuple[RedisLimiter, RedisLimiter]]:
    """Two limiters on one Redis, as two gateway processes have."""
    a, b = RedisLimiter(redis_url, timeout_s=2), RedisLimiter(redis_url, timeout_s=2)
    yield a, b
    await a.close()
    await b.close()


async def keys_of(redis: aioredis.Redis, tenant: str) -> list[str]:
    return sorted([k.decode() async for k in redis.scan_iter(f"turnpike:limits:{tenant}:*")])


async def wait_until(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if await predicate():
            return True
        await asyncio.sleep(0.1)
    return False


async def test_two_limiters_share_the_requests_exactly(pair, tenant):
    a, b = pair
    limits = TenantLimits(requests_per_minute=20)
    # 60 at once from both: the scripts are atomic, so exactly the bucket's 20 pass.
    started = time.monotonic()
    answers = await asyncio.gather(*(lim.admit(tenant, limits, 0) for lim in [a, b] * 30))
    burst_s = time.monotonic() - started
    assert sum(answer.allowed for answer in answers) == 20
    refused = [answer for answer in answers if not answer.allowed]
    assert {answer.reason for answer in refused} == {"requests"}
    # One more every 3 s, less what refilled while the burst ran (over a second on a
    # loaded machine).
    assert 3.0 - burst_s - 0.1 < refused[-1].retry_after_s <= 3.0
    assert refused[-1].headers["x-ratelimit-remaining-requests"] == "0"


async def test_two_limiters_share_tokens_budget_and_slots(pair, tenant):
    a, b = pair
    limits = TenantLimits(
        requests_per_minute=60,
        tokens_per_minute=1000,
        max_concurrent_responses=2,
        token_budget=TokenBudget(1500, "day"),
    )
    first = await a.admit(tenant, limits, 600)
    assert first.headers == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "59",
        "x-ratelimit-reset-requests": "1s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "400",
        "x-ratelimit-reset-tokens": "36s",
    }
    refused = await b.admit(tenant, limits, 600)
    assert refused.reason == "tokens"
    assert refused.retry_after_s == pytest.approx(12.0, abs=0.5)
    # Two responses in flight, one from each limiter: a third waits for a slot.
    small = await b.admit(tenant, limits, 0)
    assert small.allowed
    assert (await a.admit(tenant, limits, 0)).reason == "concurrency"
    await a.settle(first.ticket, 100)  # 500 refunded to the shared bucket, a slot freed
    second = await b.admit(tenant, limits, 600)
    assert second.allowed
    assert int(second.headers["x-ratelimit-remaining-tokens"]) in range(300, 305)
    await a.settle(first.ticket, 100)  # twice: settles and frees nothing more
    assert (await a.admit(tenant, limits, 0)).reason == "concurrency"
    # Far more used than reserved: the budget (1500) is spent by it (100 + 2000 used).
    await b.settle(second.ticket, 2000)
    spent = await a.admit(tenant, limits, 0)
    assert spent.reason == "budget"
    now = time.time()
    assert spent.retry_after_s == pytest.approx(
        TokenBudget(1500, "day").period_end(now) - now, abs=2
    )
    await b.settle(small.ticket, 0)


async def test_a_debt_is_repaid_before_the_next_admission(pair, tenant):
    a, b = pair
    limits = TenantLimits(tokens_per_minute=1000)
    admission = await a.admit(tenant, limits, 100)
    await a.settle(admission.ticket, 1600)
    refused = await b.admit(tenant, limits, 0)
    assert refused.reason == "tokens"
    assert refused.retry_after_s == pytest.approx(36.0, abs=0.5)
    assert refused.headers["x-ratelimit-reset-tokens"].startswith("1m3")  # about 1m36s


async def test_the_budget_period_turns_on_the_gateway_clock(redis_url, redis, tenant):
    offset = [0.0]
    limiter = RedisLimiter(redis_url, timeout_s=2, clock=lambda: time.time() + offset[0])
    limits = TenantLimits(token_budget=TokenBudget(100, "hour"))
    try:
        assert (await limiter.admit(tenant, limits, 100)).allowed
        refused = await limiter.admit(tenant, limits, 1)
        assert refused.reason == "budget"
        (budget_key,) = await keys_of(redis, tenant)
        end = TokenBudget(100, "hour").period_end(time.time())
        # The period's key lives until an hour after the period ends.
        assert await redis.ttl(budget_key) == pytest.approx(end + 3600 - time.time(), abs=2)
        offset[0] = 3600.0  # the next hour
        assert (await limiter.admit(tenant, limits, 100)).allowed
        assert len(await keys_of(redis, tenant)) == 2
    finally:
        await limiter.close()


async def test_an_idle_tenant_leaves_nothing_behind(redis_url, redis, tenant):
    limiter = RedisLimiter(redis_url, timeout_s=2, lease_s=1.0)
    limits = TenantLimits(
        requests_per_minute=600,  # refilled in 0.1 s
        tokens_per_minute=60_000,  # 1000 refilled in 1 s
        max_concurrent_responses=5,
        max_websocket_connections=5,
    )
    try:
        admission = await limiter.admit(tenant, limits, 1000)
        slot = await limiter.open_connection(tenant, limits)
        assert slot is not None
        names = await keys_of(redis, tenant)
        assert [name.rsplit(":", 1)[1] for name in names] == [
            "connections",
            "requests",
            "responses",
            "tokens",
        ]
        for name in names:
            assert 0 < await redis.pttl(name) <= 2100
        await limiter.settle(ticket_of(admission), 1000)
        await limiter.close_connection(slot)

        async def nothing_left() -> bool:
            return await keys_of(redis, tenant) == []

        assert await wait_until(nothing_left, 5), await keys_of(redis, tenant)
        # A missing bucket is a full one.
        again = await limiter.admit(tenant, limits, 0)
        assert again.headers["x-ratelimit-remaining-requests"] == "599"
        await limiter.settle(ticket_of(again), 0)
    finally:
        await limiter.close()


async def test_the_slots_of_a_holder_that_died_free_themselves(redis_url, tenant):
    holder = RedisLimiter(redis_url, timeout_s=2, lease_s=1.0)
    other = RedisLimiter(redis_url, timeout_s=2, lease_s=1.0)
    limits = TenantLimits(max_concurrent_responses=1, max_websocket_connections=1)
    try:
        assert (await holder.admit(tenant, limits, 0)).allowed
        assert await holder.open_connection(tenant, limits) is not None
        # Alive, the holder renews its leases: well past one lease, still held.
        await asyncio.sleep(2.0)
        assert (await other.admit(tenant, limits, 0)).reason == "concurrency"
        assert await other.open_connection(tenant, limits) is None
        await holder.close()  # dies: no settlement, no more renewals
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            admission = await other.admit(tenant, limits, 0)
            if admission.allowed:
                break
            await asyncio.sleep(0.1)
        assert admission.allowed
        assert await other.open_connection(tenant, limits) is not None
    finally:
        await holder.close()
        await other.close()


async def answers(redis: aioredis.Redis) -> bool:
    try:
        return bool(await redis.ping())
    except RedisError:
        return False


async def test_redis_stopped_mid_run_then_back(redis_url, redis, tenant, redis_container):
    container = redis_container
    limiter = FallbackLimiter(RedisLimiter(redis_url, timeout_s=1), retry_s=0.5)
    fallbacks = Delta("turnpike_gateway_limiter_fallbacks_total")
    limits = TenantLimits(requests_per_minute=100, max_concurrent_responses=30)
    try:
        shared = await limiter.admit(tenant, limits, 0)
        assert ticket_of(shared).issuer == "redis"
        container.stop(timeout=5)
        begin = time.monotonic()
        local = [await limiter.admit(tenant, limits, 0) for _ in range(20)]
        assert time.monotonic() - begin < 1.0  # serving goes on, unhurried
        assert all(admission.allowed for admission in local)
        assert {ticket_of(admission).issuer for admission in local} == {"local"}
        assert limiter.degraded and fallbacks.change == 1
        await limiter.settle(ticket_of(shared), 0)  # not sent to a Redis known to be down
        for admission in local:
            await limiter.settle(ticket_of(admission), 0)
        container.start()
        assert await wait_until(lambda: answers(redis), 30), "redis did not come back"

        async def shared_again() -> bool:
            return not limiter.degraded

        assert await wait_until(shared_again, 10)
        back = await limiter.admit(tenant, limits, 0)
        assert ticket_of(back).issuer == "redis"
        # A restarted Redis starts empty: the bucket is full again.
        assert back.headers["x-ratelimit-remaining-requests"] == "99"
        await limiter.settle(ticket_of(back), 0)
        assert fallbacks.change == 1
    finally:
        container.reload()
        if container.status != "running":
            container.start()
        await limiter.close()
