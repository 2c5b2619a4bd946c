"""``RedisLimiter``: limits that hold across gateway processes and replicas.

Each operation is one Lua script, run atomically by Redis in one round trip, on Redis's
own clock (``TIME``), so the replicas' clocks do not matter for the buckets. Keys, per
tenant:

- ``turnpike:limits:<tenant>:requests`` and ``:tokens``: a bucket, a hash of its level
  ``l`` and the time ``t`` of that level (ms); it expires when it would be full again, and
  a missing bucket is a full one.
- ``turnpike:limits:<tenant>:budget:<period>:<start>``: tokens used or reserved in that
  budget period; it expires an hour after the period ends. The period is taken on the
  gateway's clock (it only matters at the instant a period turns).
- ``turnpike:limits:<tenant>:responses`` and ``:connections``: the slots held, a sorted
  set of slot ids scored by their lease's end (ms). The scripts drop expired leases before
  counting; the limiter renews the leases of the slots it holds every third of a lease,
  in one round trip, so a gateway that dies leaves its slots for one lease at most.

Redis trouble (refused connection, timeout, script error) is ``LimiterUnavailable``, after
at most ``timeout_s``: the client is built without retries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING

from redis import asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from turnpike.gateway.tenancy.limits import core
from turnpike.gateway.tenancy.limits.core import Admission, Clock, ConnectionSlot, Seen, Ticket
from turnpike.gateway.tenancy.limits.metrics import count_refusal

if TYPE_CHECKING:
    from redis.typing import EncodableT

    from turnpike.gateway.tenancy.tenant_limits import TenantLimits

log = logging.getLogger(__name__)

ISSUER = "redis"
PREFIX = "turnpike:limits:"
BUDGET_GRACE_S = 3600  # a budget key outlives its period by this (late settlements)

# Shared by the scripts: Redis's clock in ms, and a bucket read (refilled) and written
# (with an expiry at the time it is full again).
_BUCKET = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function level(key, cap)
  local h = redis.call('HMGET', key, 'l', 't')
  if not h[1] then return cap end
  local l = tonumber(h[1])
  local elapsed = now - tonumber(h[2])
  if elapsed > 0 then l = l + elapsed * cap / 60000 end
  if l > cap then l = cap end
  return l
end
local function store(key, cap, l)
  if l > cap then l = cap end
  redis.call('HSET', key, 'l', string.format('%.17g', l), 't', now)
  redis.call('PEXPIRE', key, math.ceil((cap - l) * 60000 / cap) + 1000)
end
local function show(x)
  if x == nil then return '' end
  return string.format('%.17g', x)
end
"""

# KEYS: requests bucket, tokens bucket, budget, responses.
# ARGV: rpm, tpm, estimate, budget tokens, budget expiry (unix s), max in flight, slot id,
# lease (ms); '' for a limit the tenant does not have.
# Returns the reason of a refusal ('' to admit) and what it saw before reserving: the
# requests level, the tokens level, the budget used, the responses in flight.
ADMIT = (
    _BUCKET
    + """
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local estimate, budget = tonumber(ARGV[3]), tonumber(ARGV[4])
local max_in_flight, lease = tonumber(ARGV[6]), tonumber(ARGV[8])
local reason = ''
local requests, tokens, used, in_flight
if budget then
  used = tonumber(redis.call('GET', KEYS[3]) or '0')
  if used >= budget then reason = 'budget' end
end
if rpm then
  requests = level(KEYS[1], rpm)
  if reason == '' and (rpm <= 0 or requests < 1) then reason = 'requests' end
end
if tpm then
  tokens = level(KEYS[2], tpm)
  if reason == '' and (tpm <= 0 or tokens < math.min(estimate, tpm)) then reason = 'tokens' end
end
if max_in_flight then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
  in_flight = redis.call('ZCARD', KEYS[4])
  if reason == '' and in_flight >= max_in_flight then reason = 'concurrency' end
end
if reason == '' then
  if rpm then store(KEYS[1], rpm, requests - 1) end
  if tpm then store(KEYS[2], tpm, tokens - estimate) end
  if budget then
    redis.call('INCRBY', KEYS[3], estimate)
    redis.call('EXPIREAT', KEYS[3], ARGV[5])
  end
  if max_in_flight then
    redis.call('ZADD', KEYS[4], now + lease, ARGV[7])
    redis.call('PEXPIRE', KEYS[4], lease)
  end
end
return {reason, show(requests), show(tokens), show(used), show(in_flight)}
"""
)

# KEYS: tokens bucket, budget, responses. ARGV: tpm ('' none), actual minus reserved,
# '1' when a budget was charged, slot id ('' none). A budget period that has expired is
# left alone.
SETTLE = (
    _BUCKET
    + """
local tpm, delta = tonumber(ARGV[1]), tonumber(ARGV[2])
if tpm and delta ~= 0 then store(KEYS[1], tpm, level(KEYS[1], tpm) - delta) end
if ARGV[3] == '1' and delta ~= 0 and redis.call('EXISTS', KEYS[2]) == 1 then
  redis.call('INCRBY', KEYS[2], delta)
end
if ARGV[4] ~= '' then redis.call('ZREM', KEYS[3], ARGV[4]) end
return 1
"""
)

# KEYS: connections. ARGV: cap, slot id, lease (ms). 1 when the slot was taken.
OPEN = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""

# KEYS: slots sets. ARGV: lease (ms), then for each key the number of its slot ids whose
# leases to extend, and those ids.
RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local i = 2
for _, slots in ipairs(KEYS) do
  local n = tonumber(ARGV[i])
  for j = i + 1, i + n do redis.call('ZADD', slots, now + lease, ARGV[j]) end
  redis.call('PEXPIRE', slots, lease)
  i = i + n + 1
end
return i
"""


class LimiterUnavailable(Exception):
    """Redis did not answer in time, or refused: the limits could not be checked."""


def key(tenant: str, name: str) -> str:
    return f"{PREFIX}{tenant}:{name}"


def _limit(value: int | None) -> str:
    return "" if value is None else str(value)


def _number(text: bytes) -> float | None:
    return float(text) if text else None


class RedisLimiter:
    def __init__(
        self,
        url: str,
        timeout_s: float = 0.2,
        lease_s: float = 60.0,
        max_connections: int = 32,
        clock: Clock = time.time,
    ) -> None:
        # A bounded pool: a burst of admissions queues for a few connections (a script
        # runs in microseconds) rather than opening one connection each.
        pool = aioredis.BlockingConnectionPool.from_url(
            url,
            max_connections=max_connections,
            timeout=timeout_s,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),
        )
        self._redis = aioredis.Redis.from_pool(pool)
        self._timeout = timeout_s
        self._lease_ms = max(1, round(lease_s * 1000))
        self._clock = clock  # the budget's period only; the buckets use Redis's clock
        self._admit = self._redis.register_script(ADMIT)
        self._settle = self._redis.register_script(SETTLE)
        self._open = self._redis.register_script(OPEN)
        self._renew = self._redis.register_script(RENEW)
        self._scripts_loaded = False
        self._loading = asyncio.Lock()
        # slots set key -> the slot ids this process holds there (leases to renew)
        self._held: dict[str, set[str]] = {}
        self._renewer: asyncio.Task[None] | None = None

    async def _load_scripts(self) -> None:
        """Load every script once, in one round trip, before the first call: a burst of
        first calls would otherwise each find its script missing and load it. (A Redis
        restarted later has lost them: the call that finds one missing loads it.)"""
        async with self._loading:
            if self._scripts_loaded:
                return
            async with self._redis.pipeline(transaction=False) as pipe:
                for script in (self._admit, self._settle, self._open, self._renew):
                    pipe.script_load(script.script)
                await pipe.execute()
            self._scripts_loaded = True

    async def _call(self, operation: str, run):
        try:
            async with asyncio.timeout(self._timeout):
                if not self._scripts_loaded:
                    await self._load_scripts()
                return await run()
        except (RedisError, OSError, TimeoutError) as err:
            raise LimiterUnavailable(
                f"redis {operation} failed: {type(err).__name__}: {err}"
            ) from err

    async def admit(self, tenant: str, limits: TenantLimits, estimated_tokens: int) -> Admission:
        estimate = max(0, int(estimated_tokens))
        now = self._clock()
        ticket = core.new_ticket(ISSUER, tenant, limits, estimate, now)
        if core.unlimited(limits):
            return core.admitted(limits, estimate, Seen(now), ticket)
        budget = limits.token_budget
        keys = [
            key(tenant, "requests"),
            key(tenant, "tokens"),
            key(tenant, f"budget:{ticket.budget_window}"),
            key(tenant, "responses"),
        ]
        args: list[EncodableT] = [
            _limit(limits.requests_per_minute),
            _limit(limits.tokens_per_minute),
            estimate,
            "" if budget is None else budget.tokens,
            "" if budget is None else int(budget.period_end(now)) + BUDGET_GRACE_S,
            _limit(limits.max_concurrent_responses),
            ticket.slot or "",
            self._lease_ms,
        ]
        reply = await self._call("admit", lambda: self._admit(keys, args))
        reason = reply[0].decode()
        used, in_flight = _number(reply[3]), _number(reply[4])
        seen = Seen(
            now,
            requests=_number(reply[1]),
            tokens=_number(reply[2]),
            budget_used=None if used is None else int(used),
            in_flight=None if in_flight is None else int(in_flight),
        )
        if reason:
            count_refusal(reason)
            return core.refused(limits, estimate, seen, reason)
        if ticket.slot is not None:
            self._hold(keys[3], ticket.slot)
        return core.admitted(limits, estimate, seen, ticket)

    async def settle(self, ticket: Ticket, actual_tokens: int) -> None:
        if not ticket.take() or not ticket.charges:
            return
        delta = max(0, int(actual_tokens)) - ticket.reserved_tokens
        responses = key(ticket.tenant, "responses")
        if ticket.slot is not None:
            self._release(responses, ticket.slot)
        elif delta == 0:
            return  # the estimate was exact: nothing to change
        keys = [
            key(ticket.tenant, "tokens"),
            key(ticket.tenant, f"budget:{ticket.budget_window}"),
            responses,
        ]
        args: list[EncodableT] = [
            _limit(ticket.tokens_per_minute),
            delta,
            "" if ticket.budget_window is None else "1",
            ticket.slot or "",
        ]
        await self._call("settle", lambda: self._settle(keys, args))

    async def open_connection(self, tenant: str, limits: TenantLimits) -> ConnectionSlot | None:
        cap = limits.max_websocket_connections
        if cap is None:
            return ConnectionSlot(tenant, ISSUER)
        slot_id = core.new_slot_id()
        slot = ConnectionSlot(tenant, ISSUER, slot_id)
        connections = key(tenant, "connections")
        taken = await self._call(
            "open_connection", lambda: self._open([connections], [cap, slot_id, self._lease_ms])
        )
        if not taken:
            count_refusal("connections")
            return None
        self._hold(connections, slot_id)
        return slot

    async def close_connection(self, slot: ConnectionSlot) -> None:
        if not slot.take() or slot.id is None:
            return
        connections = key(slot.tenant, "connections")
        self._release(connections, slot.id)
        await self._call("close_connection", lambda: self._redis.zrem(connections, slot.id))

    def forget(self, held: Ticket | ConnectionSlot) -> None:
        """Settle or close without Redis (it is down): the slot's lease is no longer
        renewed, so it ends by itself; the estimate stays charged."""
        if held.take():
            slot = held.slot if isinstance(held, Ticket) else held.id
            name = "responses" if isinstance(held, Ticket) else "connections"
            if slot is not None:
                self._release(key(held.tenant, name), slot)

    async def ping(self) -> bool:
        try:
            return bool(await self._call("ping", self._redis.ping))
        except LimiterUnavailable:
            return False

    async def close(self) -> None:
        await core.stop(self._renewer)
        self._renewer = None
        await self._redis.aclose()

    # -- the leases of the slots this process holds -------------------------------------

    def _hold(self, slots: str, slot: str) -> None:
        self._held.setdefault(slots, set()).add(slot)
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew_forever(), name="limits-renew")

    def _release(self, slots: str, slot: str) -> None:
        held = self._held.get(slots)
        if held is not None:
            held.discard(slot)
            if not held:
                del self._held[slots]

    async def _renew_forever(self) -> None:
        every = self._lease_ms / 3000
        while True:
            await asyncio.sleep(every)
            try:
                await self.renew()
            except LimiterUnavailable as err:
                log.debug("renewing the limiter's leases failed: %s", err)

    async def renew(self) -> int:
        """Extend the lease of every slot this process holds (one round trip); the
        renewal loop calls it every third of a lease. The number of slots renewed."""
        renewing = {slots: sorted(ids) for slots, ids in self._held.items()}
        if not renewing:
            return 0

        args: list[str | int] = [self._lease_ms]
        for ids in renewing.values():
            args += [len(ids), *ids]
        await self._call("renew", lambda: self._renew(list(renewing), args))
        # A slot released while its renewal was on the way may have been added back.
        stale = {
            slots: gone
            for slots, ids in renewing.items()
            if (gone := set(ids) - self._held.get(slots, set()))
        }
        if stale:

            async def drop() -> None:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for slots, gone in stale.items():
                        pipe.zrem(slots, *gone)
                    await pipe.execute()

            await self._call("renew", drop)
        return sum(len(ids) for ids in renewing.values())
