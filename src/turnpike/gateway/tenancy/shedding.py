"""Overload shedding: a bound on the responses one gateway process has in flight, so that
past its capacity the gateway answers a fast 503 instead of queueing until every stream
crawls.

Free of I/O: ``InFlight`` counts responses by tenant and decides. Work is of two kinds:

- a response that *starts* a conversation (no ``previous_response_id``, no
  ``conversation``) is new work, bound by ``bound``: fixed (``TURNPIKE_MAX_IN_FLIGHT``)
  or moved by the adaptive limit (``turnpike.gateway.tenancy.adaptive_limit``). Below the
  soft limit every tenant is admitted; between it and the bound only a tenant under its
  fair share (the bound split evenly among the tenants with conversations starting, the
  newcomer counted), so the tenant that holds the most is refused first; at the bound,
  everyone is refused;
- a response that *continues* one (a turn of an agent loop already admitted) is refused
  only at the ``ceiling`` of every response in flight. Refusing it would waste the loop's
  work so far, and its client waits for each answer before it asks again: a closed loop
  whose load cannot outgrow the loops admitted, so under it latency grows as a queue
  does, while new conversations are the ones turned away.

A response already admitted is never cut off: shedding happens only at admission, and
``release`` is called once it finishes.
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
        """``bound`` conversations starting at once at most, and as many responses in all
        (the ceiling, until the adaptive limit moves ``bound`` under it); 0 turns
        shedding off."""
        if bound < 0:
            raise ValueError("bound must be >= 0")
        self.bound = bound
        self.ceiling = bound
        self.soft_fraction = soft_fraction
        self._by_tenant: Counter[str] = Counter()  # conversations starting, by tenant
        self.starting = 0  # responses that start a conversation
        self.total = 0  # every response in flight

    @property
    def soft(self) -> int:
        return int(self.bound * self.soft_fraction)

    def check(self, tenant: str, continuing: bool = False) -> Shed | None:
        """Why a new response of ``tenant`` would be refused now, or None."""
        if not self.bound:
            return None
        if self.total >= self.ceiling:
            return Shed("full", self.total, self.ceiling)
        if continuing:
            return None
        if self.starting >= self.bound:
            return Shed("full", self.starting, self.bound)
        if self.starting >= self.soft and self._by_tenant[tenant] >= self.fair_share(tenant):
            return Shed("over_fair_share", self.starting, self.bound)
        return None

    def try_admit(self, tenant: str, continuing: bool = False) -> Shed | None:
        """Count a new response of ``tenant``, or say why it is refused (counting nothing)."""
        if (shed := self.check(tenant, continuing)) is not None:
            return shed
        if not continuing:
            self._by_tenant[tenant] += 1
            self.starting += 1
        self.total += 1
        return None

    def release(self, tenant: str, continuing: bool = False) -> None:
        if self.total <= 0:
            raise ValueError("no response in flight")
        if not continuing:
            held = self._by_tenant[tenant]
            if held <= 0:
                raise ValueError(f"{tenant} has no response in flight")
            if held == 1:
                del self._by_tenant[tenant]
            else:
                self._by_tenant[tenant] = held - 1
            self.starting -= 1
        self.total -= 1

    def fair_share(self, tenant: str) -> int:
        tenants = len(self._by_tenant) + (tenant not in self._by_tenant)
        return max(1, self.bound // tenants)

    def held_by(self, tenant: str) -> int:
        """Conversations ``tenant`` is starting now."""
        return self._by_tenant[tenant]

    def has_room(self) -> bool:
        """Whether a new conversation would be admitted now (readiness, a new socket)."""
        return not self.bound or (self.starting < self.bound and self.total < self.ceiling)
