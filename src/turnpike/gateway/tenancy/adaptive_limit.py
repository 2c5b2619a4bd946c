"""An adaptive bound on the responses one gateway process has in flight: it measures how
long a new response waits for its first token and moves the bound toward the concurrency
at which that wait stays near its unloaded value, so the bound fits the machine, the
model and the workload instead of a figure measured elsewhere.

Free of I/O, with an injected clock: ``AdmissionControl`` tells it how many responses
are in flight (``in_use``) and each response's latency sample (``sample``), and reads
``limit``.

**The signal: time to first token at the gateway, from admission**: from the moment a
response takes its slot to its first output token leaving. Responses stream and vary in
length (20 tokens or 2,000), so their whole time is not comparable; this part is, and it
is where overload shows: on a 2-core machine the decode pace of each stream stays at the
model's speed up to 256 streams at once, while the wait for the first token grows from
about 70 ms to seconds, because everything an admitted response waits for lands in it
(preparation on a busy event loop, safety, rendering, routing, the worker's queue and
prefill). It starts at admission, as Envoy's filter times a request from when it lets it
through: the time a request spent before (its head and body arriving, the refusals queued
ahead of it in a burst) grows with the load offered, not with the concurrency admitted,
and cutting the bound cannot shorten it. It also arrives early, at the first token, so
the bound learns from a burst while the burst's streams still run, not seconds later
when they end. Rejected as signals: the API overhead (known only at the
end, and blind to the worker's queue), the gap between deltas (workers send on a schedule
and catch up, so it measures the relay, not the wait), and time per output token (flat
under overload here). Its weakness, prefill that grows with an uncached prompt, is damped
by taking a window's median and the baseline as a minimum.

**The control**, after Envoy's adaptive concurrency filter (a gradient of a minimum
latency over a window's percentile, with headroom) and Netflix's Gradient2 (a tolerance,
square-root headroom, no growth while the limit is not used):

- samples are gathered in windows of ``window_s``, or of as many samples as the limit
  (a burst's whole round), whichever comes first, and ``MIN_SAMPLES`` at least; a
  window's latency is their median;
- the baseline is the lowest window latency of the last ``baseline_windows`` windows,
  counted in windows rather than seconds, so a minimum goes stale under traffic that no
  longer reaches it (a slower model, a heavier workload) but not while the process idles;
- the limit moves only when it was used (the most in flight during the window at least
  half of it): otherwise latency says nothing about concurrency;
- over ``baseline * tolerance + BUFFER_S``, the limit is cut by that ratio (at most by
  half); the samples of responses admitted before the cut are then ignored, since they
  reflect the limit already judged too high and would cut it again for the same burst;
- within it, the limit grows by its square root (room for a queue that grows slower
  than the limit);
- always between ``minimum`` and ``maximum`` (``TURNPIKE_MAX_IN_FLIGHT``, the ceiling).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

# Samples a window needs before it counts (one response's prefill is not a trend).
MIN_SAMPLES = 3
# Added to the threshold: scheduling jitter that a tolerance of a tiny baseline (a few ms
# of cached prompt) would otherwise take for queueing.
BUFFER_S = 0.02
# The most a window may cut the limit by, as Envoy's and Gradient2's gradients floor at 0.5.
MAX_CUT = 0.5


@dataclass(frozen=True)
class AdaptiveParams:
    initial: int
    minimum: int
    maximum: int
    tolerance: float = 2.0
    window_s: float = 0.5
    baseline_windows: int = 120

    def __post_init__(self) -> None:
        if not 1 <= self.minimum <= self.maximum:
            raise ValueError("need 1 <= minimum <= maximum")
        if not self.minimum <= self.initial <= self.maximum:
            raise ValueError("need minimum <= initial <= maximum")
        if self.tolerance < 1 or self.window_s <= 0 or self.baseline_windows < 1:
            raise ValueError("need tolerance >= 1, window_s > 0, baseline_windows >= 1")

    @classmethod
    def within(
        cls, ceiling: int, initial: int, minimum: int, tolerance: float, window_s: float
    ) -> AdaptiveParams:
        """Parameters whose minimum and initial limit never exceed ``ceiling`` (a ceiling
        set below the minimum makes the limit fixed there)."""
        low = min(minimum, ceiling)
        return cls(min(max(initial, low), ceiling), low, ceiling, tolerance, window_s)


class AdaptiveLimit:
    def __init__(self, params: AdaptiveParams, clock: Callable[[], float]) -> None:
        self.params = params
        self._clock = clock
        self._limit = float(params.initial)
        self._window: list[float] = []
        self._window_start: float | None = None
        self._peak = 0  # the most in flight since the window opened
        self._history: deque[float] = deque(maxlen=params.baseline_windows)
        # Responses carry the cohort they were admitted in; a cut starts a new one.
        self.cohort = 0
        self.signal_s: float | None = None  # the last window's latency
        self.baseline_s: float | None = None

    @property
    def limit(self) -> int:
        return int(self._limit)

    def in_use(self, in_flight: int) -> None:
        """Responses in flight now (at an admission, or a refusal)."""
        self._peak = max(self._peak, in_flight)

    def sample(self, latency_s: float, cohort: int, in_flight: int) -> bool:
        """One response's time to its first token; ``cohort`` as it was admitted. Whether
        the limit moved."""
        self.in_use(in_flight)
        if cohort < self.cohort:
            return False
        now = self._clock()
        if self._window_start is None:
            self._window_start = now
        self._window.append(latency_s)
        count = len(self._window)
        if count < MIN_SAMPLES:
            return False
        if now - self._window_start < self.params.window_s and count < self.limit:
            return False
        return self._close_window(in_flight)

    def now(self) -> float:
        return self._clock()

    def _close_window(self, in_flight: int) -> bool:
        observed = statistics.median(self._window)
        used = self._peak * 2 >= self._limit
        self._window.clear()
        self._window_start = None
        self._peak = in_flight
        self._history.append(observed)
        self.signal_s = observed
        baseline = self.baseline_s = min(self._history)
        if not used:
            return False
        p = self.params
        before = self.limit
        threshold = baseline * p.tolerance + BUFFER_S
        if observed > threshold:
            self._limit = max(p.minimum, self._limit * max(MAX_CUT, threshold / observed))
            self.cohort += 1
        else:
            self._limit = min(p.maximum, self._limit + math.sqrt(self._limit))
        return self.limit != before
