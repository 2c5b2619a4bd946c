"""The adaptive in-flight limit (turnpike.gateway.tenancy.adaptive_limit) on a clock of its own:
it falls under rising time to first token, grows back once it recovers, stays within its
minimum and ceiling, holds still while unused, lets a stale minimum go, and does not cut
twice for one burst."""

from __future__ import annotations

import pytest

from turnpike.gateway.tenancy.adaptive_limit import (
    BUFFER_S,
    MIN_SAMPLES,
    AdaptiveLimit,
    AdaptiveParams,
)

WINDOW_S = 0.5


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def limiter(
    initial: int = 32, minimum: int = 4, maximum: int = 256, **kw
) -> tuple[AdaptiveLimit, Clock]:
    clock = Clock()
    params = AdaptiveParams(initial, minimum, maximum, window_s=WINDOW_S, **kw)
    return AdaptiveLimit(params, clock), clock


def window(
    limit: AdaptiveLimit, clock: Clock, latency_s: float, in_flight: int | None = None
) -> None:
    """One window of samples of ``latency_s``, from responses admitted now, with
    ``in_flight`` responses at once (default: the whole limit, so it is used)."""
    used = limit.limit if in_flight is None else in_flight
    cohort = limit.cohort
    for _ in range(MIN_SAMPLES):
        limit.sample(latency_s, cohort, used)
    clock.now += WINDOW_S
    limit.sample(latency_s, cohort, used)


def test_rising_latency_brings_the_limit_down_and_recovery_brings_it_back() -> None:
    limit, clock = limiter(initial=64)
    for _ in range(3):
        window(limit, clock, 0.07)  # unloaded: the baseline
    grown = limit.limit
    assert grown > 64  # used, and within tolerance: it grows
    assert limit.baseline_s == pytest.approx(0.07)
    seen = [grown]
    for latency in (0.3, 0.5, 0.8):  # first tokens wait longer and longer
        window(limit, clock, latency)
        seen.append(limit.limit)
    assert seen == sorted(seen, reverse=True) and seen[-1] < grown / 4
    low = limit.limit
    for _ in range(10):
        window(limit, clock, 0.08)
    assert limit.limit > 2 * low
    assert limit.signal_s == pytest.approx(0.08)


def test_a_cut_is_at_most_half_and_in_proportion_to_the_excess() -> None:
    limit, clock = limiter(initial=100, maximum=100)
    window(limit, clock, 0.1)  # baseline 0.1: threshold 0.2 + buffer
    assert limit.limit == 100  # at the ceiling
    threshold = 0.1 * 2 + BUFFER_S
    window(limit, clock, threshold * 1.25)
    assert limit.limit == 80
    window(limit, clock, 10.0)
    assert limit.limit == 40


def test_never_below_the_minimum_nor_above_the_ceiling() -> None:
    limit, clock = limiter(initial=16, minimum=10, maximum=20)
    window(limit, clock, 0.05)
    for _ in range(20):
        window(limit, clock, 0.05)
        assert limit.limit <= 20
    assert limit.limit == 20
    for _ in range(20):
        window(limit, clock, 5.0)
        assert limit.limit >= 10
    assert limit.limit == 10


def test_an_unused_limit_neither_grows_nor_falls() -> None:
    limit, clock = limiter(initial=64)
    for _ in range(10):
        window(limit, clock, 0.05, in_flight=20)  # under half of it
    assert limit.limit == 64
    for _ in range(3):
        window(limit, clock, 2.0, in_flight=20)  # slow, but not for want of room
    assert limit.limit == 64
    window(limit, clock, 2.0, in_flight=40)
    assert limit.limit < 64


def test_refusals_count_as_use() -> None:
    limit, clock = limiter(initial=64)
    window(limit, clock, 0.05, in_flight=5)
    limit.in_use(64)  # a request refused at the bound
    window(limit, clock, 0.05, in_flight=5)
    assert limit.limit > 64


def test_a_stale_minimum_gives_way_to_what_the_machine_does_now() -> None:
    limit, clock = limiter(initial=64, baseline_windows=10)
    window(limit, clock, 0.05)
    assert limit.baseline_s == pytest.approx(0.05)
    for _ in range(10):  # a slower model since: 0.2 s is the best it does now
        window(limit, clock, 0.2)
    assert limit.baseline_s == pytest.approx(0.2)
    settled = limit.limit
    window(limit, clock, 0.25)  # within tolerance of the new baseline: no cut
    assert limit.limit >= settled


def test_idle_time_does_not_age_the_minimum() -> None:
    limit, clock = limiter(initial=64, baseline_windows=10)
    window(limit, clock, 0.05)
    clock.now += 3600
    window(limit, clock, 0.4)  # a burst after an idle hour is judged against 0.05
    assert limit.baseline_s == pytest.approx(0.05) and limit.limit < 64


def test_one_burst_is_cut_once_its_late_samples_are_ignored() -> None:
    limit, clock = limiter(initial=64)
    window(limit, clock, 0.05)
    admitted_in = limit.cohort  # a burst admitted at the old limit
    before = limit.limit
    for _ in range(MIN_SAMPLES):
        limit.sample(1.0, admitted_in, before)
    clock.now += WINDOW_S
    assert limit.sample(1.0, admitted_in, before)  # the window closes: one cut
    after = limit.limit
    assert after < before
    for _ in range(5):  # the same burst's later first tokens: ignored
        for _ in range(MIN_SAMPLES):
            assert not limit.sample(1.0, admitted_in, before)
        clock.now += WINDOW_S
        assert not limit.sample(1.0, admitted_in, before)
    assert limit.limit == after


def test_a_window_needs_its_time_and_a_few_samples() -> None:
    limit, clock = limiter(initial=64)
    clock.now += 10
    assert not limit.sample(0.05, 0, 64)  # one sample, however late, is not a window
    assert limit.signal_s is None
    for _ in range(MIN_SAMPLES - 1):
        limit.sample(0.05, 0, 64)
    assert limit.signal_s is None  # enough samples, not yet the time
    clock.now += WINDOW_S
    limit.sample(0.05, 0, 64)
    assert limit.signal_s == pytest.approx(0.05)


def test_parameters_are_checked_and_fitted_under_a_low_ceiling() -> None:
    with pytest.raises(ValueError):
        AdaptiveParams(8, 16, 256)
    with pytest.raises(ValueError):
        AdaptiveParams(8, 4, 256, tolerance=0.5)
    fitted = AdaptiveParams.within(2, initial=64, minimum=8, tolerance=2.0, window_s=0.5)
    assert (fitted.initial, fitted.minimum, fitted.maximum) == (2, 2, 2)
    assert AdaptiveParams.within(256, 4, 8, 2.0, 0.5).initial == 8


def test_a_window_closes_early_once_it_holds_a_round_of_the_limit() -> None:
    limit, _ = limiter(initial=8, minimum=4)
    cohort = limit.cohort
    for _ in range(7):  # a burst's first tokens, all within the window's time
        assert not limit.sample(0.05, cohort, 8)
    assert limit.signal_s is None
    assert limit.sample(0.05, cohort, 8)  # the eighth: the whole round, judged now
    assert limit.signal_s == pytest.approx(0.05) and limit.limit > 8


def test_a_round_is_the_whole_limit_even_after_a_cut_to_a_fraction() -> None:
    limit, clock = limiter(initial=40, minimum=4)
    window(limit, clock, 0.05)
    window(limit, clock, 0.3)  # cut to a fraction of a response: a round is what it admits
    cohort, whole = limit.cohort, limit.limit
    for _ in range(whole - 1):
        assert not limit.sample(0.05, cohort, whole)
    assert limit.sample(0.05, cohort, whole)
