"""What a tenant may do: its rate limits, concurrency, token budget and models. Read from
the tenants file (``turnpike.gateway.tenancy.tenants_file``); enforced by
``turnpike.gateway.tenancy.limits`` and ``turnpike.gateway.tenancy.admission``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

PERIODS = ("hour", "day", "week", "month")
_FIXED_PERIODS = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}


@dataclass(frozen=True)
class TokenBudget:
    """Input plus output tokens a tenant may use per calendar period (UTC; a week starts
    on Monday, a month on its first day)."""

    tokens: int
    period: str  # hour | day | week | month

    def __post_init__(self) -> None:
        if self.period not in PERIODS:
            raise ValueError(f"period {self.period!r} is not one of {', '.join(PERIODS)}")

    def period_start(self, now: float) -> float:
        """The unix time the period holding ``now`` began."""
        moment = datetime.fromtimestamp(now, UTC)
        hour = moment.replace(minute=0, second=0, microsecond=0)
        day = hour.replace(hour=0)
        start = {
            "hour": hour,
            "day": day,
            "week": day - timedelta(days=day.weekday()),
            "month": day.replace(day=1),
        }[self.period]
        return start.timestamp()

    def period_end(self, now: float) -> float:
        """The unix time the period holding ``now`` ends (the next one's start)."""
        start = datetime.fromtimestamp(self.period_start(now), UTC)
        if self.period == "month":
            end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
        else:
            end = start + _FIXED_PERIODS[self.period]
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

    def allows_model(self, model: str) -> bool:
        return self.models is None or model in self.models


UNLIMITED = TenantLimits()
# What limits() gives a name that is no tenant, such as one a reload removed while its
# WebSocket connections are still open: nothing allowed.
NO_ACCESS = TenantLimits(0, 0, 0, 0, None, frozenset())
