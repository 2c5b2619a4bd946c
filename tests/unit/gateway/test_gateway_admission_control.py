"""turnpike.gateway.tenancy.admission without a gateway: the order of its checks, the errors it maps the
limiter's refusals to, and release (once, whatever happens)."""

from __future__ import annotations

import pytest

from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.request import parse_create
from turnpike.gateway.tenancy.admission import AdmissionControl, estimate_tokens
from turnpike.gateway.tenancy.limits import LocalLimiter
from turnpike.gateway.tenancy.shedding import InFlight
from turnpike.gateway.tenancy.tenant_limits import TenantLimits, TokenBudget


def request(**body):
    return parse_create({"model": "turnpike-sim", "input": "hi", **body}, default_model="x")


def control(bound: int = 4) -> AdmissionControl:
    return AdmissionControl(LocalLimiter(), InFlight(bound))


async def test_a_model_outside_the_list_is_refused_before_anything_is_counted() -> None:
    admission = control()
    with pytest.raises(ApiError) as refused:
        await admission.admit("t", TenantLimits(models=frozenset({"other"})), request(), 10)
    assert (refused.value.status, refused.value.code) == (400, "model_not_found")
    assert admission.in_flight.total == 0


async def test_over_the_requests_limit_a_429_with_headers_and_nothing_held() -> None:
    admission = control()
    limits = TenantLimits(requests_per_minute=1)
    first = await admission.admit("t", limits, request(), 10)
    assert first.headers["x-ratelimit-limit-requests"] == "1"
    with pytest.raises(ApiError) as refused:
        await admission.admit("t", limits, request(), 10)
    error = refused.value
    assert (error.status, error.code, error.type) == (429, "rate_limit_exceeded", "requests")
    assert int(error.headers["retry-after"]) >= 1
    assert error.headers["x-ratelimit-remaining-requests"] == "0"
    assert admission.in_flight.total == 1  # only the first


async def test_a_spent_budget_is_insufficient_quota() -> None:
    admission = control()
    limits = TenantLimits(token_budget=TokenBudget(10, "day"))
    admitted = await admission.admit("t", limits, request(), 10)
    await admission.release(admitted, 500)
    with pytest.raises(ApiError) as refused:
        await admission.admit("t", limits, request(), 10)
    assert (refused.value.status, refused.value.code) == (429, "insufficient_quota")


async def test_past_the_bound_a_fast_503() -> None:
    admission = control(bound=1)
    await admission.admit("t", TenantLimits(), request(), 10)
    with pytest.raises(ApiError) as refused:
        await admission.admit("u", TenantLimits(), request(), 10)
    assert (refused.value.status, refused.value.code) == (503, "server_overloaded")
    assert refused.value.headers == {"retry-after": "1"}


async def test_release_frees_the_slot_once() -> None:
    admission = control(bound=1)
    limits = TenantLimits(max_concurrent_responses=1)
    admitted = await admission.admit("t", limits, request(), 10)
    await admission.release(admitted, 100)
    await admission.release(admitted, 100)  # a second release changes nothing
    assert admission.in_flight.total == 0
    again = await admission.admit("t", limits, request(), 10)
    await admission.release(again, 0)
    await admission.release(None, 0)


async def test_a_turn_that_continues_a_conversation_is_bound_only_by_the_ceiling() -> None:
    from turnpike.gateway.tenancy.adaptive_limit import AdaptiveLimit, AdaptiveParams

    adaptive = AdaptiveLimit(AdaptiveParams(2, 2, 4), lambda: 0.0)
    admission = AdmissionControl(LocalLimiter(), InFlight(4), adaptive)
    new = [await admission.admit("t", TenantLimits(), request(), 10) for _ in range(2)]
    with pytest.raises(ApiError):  # new conversations: at the adaptive bound
        await admission.admit("t", TenantLimits(), request(), 10)
    assert not admission.can_admit()
    follow_up = request(previous_response_id="resp_1")
    loops = [await admission.admit("t", TenantLimits(), follow_up, 10) for _ in range(2)]
    assert admission.in_flight.total == 4 and admission.in_flight.starting == 2
    with pytest.raises(ApiError):  # every response: at the ceiling
        await admission.admit("t", TenantLimits(), follow_up, 10)
    for admitted in (*new, *loops):
        await admission.release(admitted, 0)
    assert admission.in_flight.total == admission.in_flight.starting == 0
    assert admission.can_admit()


def test_the_estimate_is_the_body_over_four_plus_the_output_asked_for() -> None:
    assert estimate_tokens(request(max_output_tokens=100), 400) == 200
    assert estimate_tokens(request(), 0) == 1024


async def test_the_adaptive_limit_sets_the_bound_from_first_tokens() -> None:
    from turnpike.gateway.tenancy.adaptive_limit import MIN_SAMPLES, AdaptiveLimit, AdaptiveParams

    now = [0.0]
    adaptive = AdaptiveLimit(AdaptiveParams(4, 2, 16, window_s=0.5), lambda: now[0])
    admission = AdmissionControl(LocalLimiter(), InFlight(16), adaptive)
    assert admission.in_flight.bound == 4 and admission.ceiling == 16  # the initial limit
    assert admission.describe() == {
        "in_flight": 0,
        "starting": 0,
        "bound": 4,
        "ceiling": 16,
        "adaptive": True,
        "time_to_first_token_ms": None,
        "baseline_ms": None,
    }

    async def window(waited_s: float) -> None:
        passes = [await admission.admit("t", TenantLimits(), request(), 10) for _ in range(4)]
        assert len(passes) == 4 and admission.refusal("t") is not None  # full
        for i, admitted in enumerate(passes):
            if i == MIN_SAMPLES:
                now[0] += 0.5
            admitted.first_token(admitted.admitted_at + waited_s)  # timed from admission
            admitted.first_token(admitted.admitted_at + 9.0)  # one sample a response
        for admitted in passes:
            await admission.release(admitted, 0)

    await window(0.05)  # unloaded, used: grows by its square root
    assert admission.in_flight.bound == 6
    block = admission.describe()
    assert block["time_to_first_token_ms"] == 50.0 and block["baseline_ms"] == 50.0
    now[0] += 0.5
    passes = [await admission.admit("t", TenantLimits(), request(), 10) for _ in range(6)]
    for admitted in passes:
        admitted.first_token(admitted.admitted_at + 1.0)  # 20x the baseline: cut by half
    assert admission.in_flight.bound == 3 and not admission.can_admit()


def test_with_shedding_off_the_adaptive_limit_is_not_used() -> None:
    from turnpike.gateway.tenancy.adaptive_limit import AdaptiveLimit, AdaptiveParams

    adaptive = AdaptiveLimit(AdaptiveParams(4, 2, 16), lambda: 0.0)
    admission = AdmissionControl(LocalLimiter(), InFlight(0), adaptive)
    assert admission.adaptive is None and admission.in_flight.bound == 0
    assert admission.can_admit() and admission.refusal("t") is None
