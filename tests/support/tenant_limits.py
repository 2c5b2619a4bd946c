"""The limits of a tenant as the limiter tests use them.

A stand-in with the shape of gateway.tenants' ``TokenBudget`` and ``TenantLimits`` until
that module lands; then this module re-exports those."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True)
class TokenBudget:
    tokens: int
    period: str  # hour | day | week | month

    def period_start(self, now: float) -> float:
        at = datetime.fromtimestamp(now, UTC)
        if self.period == "hour":
            start = at.replace(minute=0, second=0, microsecond=0)
        elif self.period == "day":
            start = at.replace(hour=0, minute=0, second=0, microsecond=0)
        elif self.period == "week":
            day = at.replace(hour=0, minute=0, second=0, microsecond=0)
            start = day - timedelta(days=day.weekday())
        else:
            start = at.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        return start.timestamp()

    def period_end(self, now: float) -> float:
        start = datetime.fromtimestamp(self.period_start(now), UTC)
        if self.period == "month":
            end = (start + timedelta(days=32)).replace(day=1)
        else:
            end = start + {"hour": timedelta(hours=1), "day": timedelta(days=1)}.get(
                self.period, timedelta(weeks=1)
            )
        return end.timestamp()


@dataclass(frozen=True)
class TenantLimits:
    """A tenant's limits; None is no limit."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None  # input plus output
    max_concurrent_responses: int | None = None
    max_websocket_connections: int | None = None
    token_budget: TokenBudget | None = None
    models: frozenset[str] | None = None  # None: every model
