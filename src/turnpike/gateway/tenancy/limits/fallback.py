"""``FallbackLimiter``: Redis's limits while Redis answers, this process's otherwise.

The gateway never stops serving because Redis is down. The first operation that finds
Redis unreachable (a refused connection at once, a silent Redis after ``timeout_s``)
switches to a ``LocalLimiter``: logged once at WARNING, counted in
``turnpike_gateway_limiter_fallbacks_total``, and ``turnpike_gateway_limiter_degraded`` is 1
until a background probe finds Redis again (every ``retry_s``), which is logged too. No
request waits on Redis while it is known to be down.

What was taken stays with whoever took it: a ticket or connection slot is settled or
closed by the limiter that issued it. One issued by Redis and settled while Redis is down
is dropped from the leases this process renews, so its slot frees itself when the lease
ends; its estimate stays charged.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from turnpike.gateway import metrics
from turnpike.gateway.tenancy.limits import core
from turnpike.gateway.tenancy.limits.core import Admission, ConnectionSlot, Ticket
from turnpike.gateway.tenancy.limits.local import LocalLimiter
from turnpike.gateway.tenancy.limits.redis_limiter import ISSUER as REDIS
from turnpike.gateway.tenancy.limits.redis_limiter import LimiterUnavailable

if TYPE_CHECKING:
    from turnpike.gateway.tenancy.tenant_limits import TenantLimits

log = logging.getLogger(__name__)


class SharedLimiter(core.Limiter, Protocol):
    """The limits the processes share: ``RedisLimiter``, or a stand-in for it. It can be
    unreachable, and can drop what it issued from the leases this process renews."""

    def forget(self, held: Ticket | ConnectionSlot) -> None: ...

    async def ping(self) -> bool: ...


class FallbackLimiter:
    def __init__(
        self, primary: SharedLimiter, local: LocalLimiter | None = None, retry_s: float = 5.0
    ) -> None:
        self._primary = primary
        self._local = local or LocalLimiter()
        self._retry_s = retry_s
        self._probe: asyncio.Task[None] | None = None
        metrics.LIMITER_DEGRADED.set(0)

    @property
    def degraded(self) -> bool:
        """Whether limits are held in this process alone now (Redis unreachable)."""
        return self._probe is not None

    def _fall_back(self, err: LimiterUnavailable) -> None:
        if self.degraded:
            return
        log.warning(
            "limits: Redis unreachable (%s); enforcing limits per process until it answers "
            "again (checked every %g s)",
            err,
            self._retry_s,
        )
        metrics.LIMITER_FALLBACKS.inc()
        metrics.LIMITER_DEGRADED.set(1)
        self._probe = asyncio.create_task(self._wait_for_redis(), name="limits-probe")

    async def _wait_for_redis(self) -> None:
        while True:
            await asyncio.sleep(self._retry_s)
            if await self._primary.ping():
                break
        log.warning("limits: Redis answers again; limits are shared again")
        metrics.LIMITER_DEGRADED.set(0)
        self._probe = None

    async def admit(self, tenant: str, limits: TenantLimits, estimated_tokens: int) -> Admission:
        if not self.degraded:
            try:
                return await self._primary.admit(tenant, limits, estimated_tokens)
            except LimiterUnavailable as err:
                self._fall_back(err)
        return await self._local.admit(tenant, limits, estimated_tokens)

    async def settle(self, ticket: Ticket, actual_tokens: int) -> None:
        if ticket.issuer != REDIS:
            await self._local.settle(ticket, actual_tokens)
        elif self.degraded:
            self._primary.forget(ticket)
        else:
            try:
                await self._primary.settle(ticket, actual_tokens)
            except LimiterUnavailable as err:
                self._fall_back(err)

    async def open_connection(self, tenant: str, limits: TenantLimits) -> ConnectionSlot | None:
        if not self.degraded:
            try:
                return await self._primary.open_connection(tenant, limits)
            except LimiterUnavailable as err:
                self._fall_back(err)
        return await self._local.open_connection(tenant, limits)

    async def close_connection(self, slot: ConnectionSlot) -> None:
        if slot.issuer != REDIS:
            await self._local.close_connection(slot)
        elif self.degraded:
            self._primary.forget(slot)
        else:
            try:
                await self._primary.close_connection(slot)
            except LimiterUnavailable as err:
                self._fall_back(err)

    async def close(self) -> None:
        await core.stop(self._probe)
        self._probe = None
        metrics.LIMITER_DEGRADED.set(0)
        await self._primary.close()
        await self._local.close()
