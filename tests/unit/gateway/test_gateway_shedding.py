"""Overload shedding's decisions (turnpike.gateway.tenancy.shedding), without a gateway."""

from __future__ import annotations

import pytest

from turnpike.gateway.tenancy.shedding import InFlight


def fill(in_flight: InFlight, tenant: str, count: int) -> None:
    for _ in range(count):
        assert in_flight.try_admit(tenant) is None


def test_below_the_soft_limit_everyone_is_admitted() -> None:
    in_flight = InFlight(8)  # soft limit 6
    fill(in_flight, "a", 6)
    assert in_flight.total == 6 and in_flight.held_by("a") == 6


def test_at_the_bound_everyone_is_refused_until_a_response_finishes() -> None:
    in_flight = InFlight(4)
    fill(in_flight, "a", 2)
    fill(in_flight, "b", 2)
    shed = in_flight.try_admit("c")
    assert shed is not None and shed.reason == "full" and shed.in_flight == 4
    in_flight.release("a")
    assert in_flight.try_admit("c") is None


def test_when_busy_the_tenant_over_its_fair_share_is_refused_first() -> None:
    in_flight = InFlight(8)  # soft limit 6
    # Alone, a tenant's fair share is the whole bound.
    fill(in_flight, "flood", 6)
    # A second tenant arrives: the share is half the bound each.
    fill(in_flight, "quiet", 1)
    shed = in_flight.try_admit("flood")
    assert shed is not None and shed.reason == "over_fair_share"
    # The tenant under its share still gets in, up to the bound.
    fill(in_flight, "quiet", 1)
    shed = in_flight.try_admit("quiet")
    assert shed is not None and shed.reason == "full"


def test_a_refusal_counts_nothing_and_release_undoes_admission() -> None:
    in_flight = InFlight(2)
    fill(in_flight, "a", 2)
    assert in_flight.try_admit("a") is not None
    assert in_flight.total == 2
    in_flight.release("a")
    in_flight.release("a")
    assert in_flight.total == 0 and in_flight.held_by("a") == 0
    with pytest.raises(ValueError):
        in_flight.release("a")


def test_a_zero_bound_turns_shedding_off() -> None:
    in_flight = InFlight(0)
    fill(in_flight, "a", 1000)
    assert in_flight.total == 1000
