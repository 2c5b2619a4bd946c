"""Overload shedding: a bound on the responses one gateway process has in flight, so that
past its capacity the gateway answers a fast 503 instead of queueing until every stream
crawls.

Free of I/O: ``InFlight`` counts responses by tenant and decides. Its bound is fixed
(``TURNPIKE_MAX_IN_FLIGHT``) or set as it moves by the adaptive limit
(``turnpike.gateway.tenancy.adaptive_limit``). Below the soft limit everyone is admitted. Between the soft limit and the bound, only a tenant under its fair
share (the bound split evenly among the tenants with responses in flight, the newcomer
counted) is admitted, so the tenant that holds the most is refused first. At the bound,
everyone is refused. A response already admitted is never cut off: shedding happens only
at admission, and ``release`` is called once it finishes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

# The share of the bound below which nobody is refused for being over its fair share.
SOFT_FRACTION = 0.75


@dataclass(frozen=True)
class Shed:
    """Why a request was refused: the process is full, or it is busy and the tenant
    already holds more than its fair share."""

    reason: str  # "full" | "over_fair_share"
    in_flight: int
    bound: int


class InFlight:
    def __init__(self, bound: int, soft_fraction: float = SOFT_FRACTION) -> None:
        """``bound`` responses at once at most; 0 turns shedding off."""
        if bound < 0:
            raise ValueError("bound must be >= 0")
        self.bound = bound
        self.soft_fraction = soft_fraction
        self._by_tenant: Counter[str] = Counter()
        self.total = 0

    @property
    def soft(self) -> int:
        return int(self.bound * self.soft_fraction)

    def check(self, tenant: str) -> Shed | None:
        """Why a new response of ``tenant`` would be refused now, or None."""
        if self.bound:
            if self.total >= self.bound:
                return Shed("full", self.total, self.bound)
            if self.total >= self.soft and self._by_tenant[tenant] >= self.fair_share(tenant):
                return Shed("over_fair_share", self.total, self.bound)
        return None

    def try_admit(self, tenant: str) -> Shed | None:
        """Count a new response of ``tenant``, or say why it is refused (counting nothing)."""
        if (shed := self.check(tenant)) is not None:
            return shed
        self._by_tenant[tenant] += 1
        self.total += 1
        return None

    def release(self, tenant: str) -> None:
        held = self._by_tenant[tenant]
        if held <= 0:
            raise ValueError(f"{tenant} has no response in flight")
        if held == 1:
            del self._by_tenant[tenant]
        else:
            self._by_tenant[tenant] = held - 1
        self.total -= 1

    def fair_share(self, tenant: str) -> int:
        tenants = len(self._by_tenant) + (tenant not in self._by_tenant)
        return max(1, self.bound // tenants)

    def held_by(self, tenant: str) -> int:
        return self._by_tenant[tenant]
