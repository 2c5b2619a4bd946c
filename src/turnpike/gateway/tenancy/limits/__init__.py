"""Tenants' limits: admission, settlement and connection caps.

The whole interface (``Limiter``)::

    admission = await limiter.admit(tenant, limits, estimated_tokens)
    # admission.allowed, .reason ("budget" | "requests" | "tokens" | "concurrency"),
    # .retry_after_s, .headers (x-ratelimit-*), .ticket (when allowed)
    ...
    await limiter.settle(admission.ticket, actual_tokens)  # always, in a finally
    slot = await limiter.open_connection(tenant, limits)   # None: over the cap
    await limiter.close_connection(slot)
    await limiter.close()                                  # at shutdown

``limits`` is a tenant's ``TenantLimits`` (turnpike.gateway.tenancy.tenant_limits); None in it means unlimited.

What is checked, all at once, reserving only if everything admits:

- requests per minute and tokens per minute: token buckets whose capacity is the
  per-minute limit, refilled continuously at limit/60 per second. A request takes 1 from
  the requests bucket and ``estimated_tokens`` (the caller's estimate: prompt plus maximum
  output) from the tokens bucket. It needs that many in the bucket, or a full bucket when
  the estimate is larger than the whole limit.
- the token budget of the current period (``TokenBudget``: fixed windows from its
  ``period_start``): a request is admitted while the budget is not spent (tokens used
  and reserved below it), and its estimate is reserved in it. A spent budget refuses with
  reason "budget" and ``retry_after_s`` the time to the period's end.
- responses in flight (``max_concurrent_responses``): a slot held until settlement.

``settle`` replaces the estimate by the actual usage in the tokens bucket and the budget
(more than the estimate puts the bucket into debt, which the refill repays before the
next admission; less is refunded) and frees the response slot. A request that ends
without usage (refused later, failed) settles 0. Settling twice does nothing.

``retry_after_s`` is the time until every refusing limit whose wait is known would admit
(None when only a concurrency limit or a zero limit refuses). ``headers`` are
``x-ratelimit-{limit,remaining,reset}-{requests,tokens}`` for the limits the tenant has,
after the reservation when admitted: remaining is what the bucket holds, reset the time
until it is full again, written as the OpenAI API does (``20ms``, ``1s``, ``6m0s``).

WebSocket connections (``max_websocket_connections``) are counted by
``open_connection`` / ``close_connection``.

Implementations: ``LocalLimiter()`` (in process), ``RedisLimiter(url)`` (shared by every
process and replica; raises ``LimiterUnavailable`` after at most ``timeout_s``, 0.2 s) and
``FallbackLimiter(RedisLimiter(url))`` (Redis's, falling back to a ``LocalLimiter`` while
Redis is unreachable, trying it again every ``retry_s``, 5 s: never raises for Redis).
Refusals are counted in ``turnpike_gateway_rate_limited_total{reason}`` (reason
"connections" for a connection over its cap).
"""

from turnpike.gateway.tenancy.limits.core import (
    REASONS,
    Admission,
    ConnectionSlot,
    Limiter,
    Ticket,
    format_duration,
)
from turnpike.gateway.tenancy.limits.fallback import FallbackLimiter
from turnpike.gateway.tenancy.limits.local import LocalLimiter
from turnpike.gateway.tenancy.limits.redis_limiter import LimiterUnavailable, RedisLimiter

__all__ = [
    "REASONS",
    "Admission",
    "ConnectionSlot",
    "FallbackLimiter",
    "Limiter",
    "LimiterUnavailable",
    "LocalLimiter",
    "RedisLimiter",
    "Ticket",
    "format_duration",
]
