"""What the dashboard shows, computed from snapshots of the gateway's metrics.

No I/O here: ``take_snapshot`` reads metric families already collected from a registry,
``Sampler`` keeps the last minutes of snapshots in a bounded ring, and ``Sampler.view``
turns differences between snapshots into the page's JSON: rates, and windowed
percentiles from histogram bucket deltas (as Prometheus's ``histogram_quantile`` does).

Tenants never reach a snapshot: every series is summed over its tenant (and model)
labels as it is read, so the view holds aggregates over all tenants only.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import Metric

from turnpike.gateway import metrics

QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}
# Trailing windows, in seconds: a turns/s point, a percentile point, and the stage and
# cache figures (the most recent minute).
RATE_WINDOW_S = 10.0
QUANTILE_WINDOW_S = 30.0
RECENT_WINDOW_S = 60.0
# Stages whose time is the model's rather than the API's: shown beside the stack.
MODEL_STAGES = frozenset({"generate"})

# Per pipeline, its stages in the order it runs them, each with the index of its step:
# stages that share a step run at the same time.
StageOrder = Mapping[str, Sequence[tuple[str, int]]]


def _family(metric: Any) -> str:
    """The name a metric object's samples start with (``unit`` appended)."""
    return metric.describe()[0].name


RESPONSES = _family(metrics.RESPONSES) + "_total"
REQUESTS = _family(metrics.REQUESTS) + "_total"
TOKENS = _family(metrics.TOKENS) + "_total"
TTFT = _family(metrics.TIME_TO_FIRST_TOKEN)
OVERHEAD = _family(metrics.API_OVERHEAD)
STAGE = _family(metrics.STAGE_DURATION)
CACHE_LOOKUPS = _family(metrics.CACHE_LOOKUPS) + "_total"
WEBSOCKETS = _family(metrics.WEBSOCKET_CONNECTIONS)
ACTIVE = _family(metrics.ACTIVE_RESPONSES)


@dataclass
class Histogram:
    """One histogram summed over label sets: cumulative counts by upper bound."""

    buckets: dict[float, float] = field(default_factory=dict)  # le -> cumulative count
    sum: float = 0.0
    count: float = 0.0

    def minus(self, earlier: Histogram) -> Histogram:
        """What was observed since ``earlier`` (all of it after a counter reset)."""
        if self.count < earlier.count:
            return self
        return Histogram(
            {le: n - earlier.buckets.get(le, 0.0) for le, n in self.buckets.items()},
            self.sum - earlier.sum,
            self.count - earlier.count,
        )

    def quantile(self, q: float) -> float | None:
        return histogram_quantile(q, sorted(self.buckets.items()))

    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None


def histogram_quantile(q: float, buckets: Sequence[tuple[float, float]]) -> float | None:
    """Prometheus's ``histogram_quantile``: ``buckets`` are (upper bound, cumulative
    count) ascending, the last one +Inf. Linear within the bucket the rank falls in;
    in the +Inf bucket, the highest finite bound. None without observations."""
    if len(buckets) < 2 or buckets[-1][0] != math.inf or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    below, lower = 0.0, 0.0
    for upper, cumulative in buckets:
        cumulative = max(cumulative, below)  # deltas of racing counters: keep it monotonic
        if cumulative >= rank and cumulative > below:
            if upper == math.inf:
                return buckets[-2][0]
            if upper <= 0:
                return upper
            return lower + (upper - lower) * (rank - below) / (cumulative - below)
        below, lower = cumulative, upper
    return buckets[-2][0]


@dataclass
class Snapshot:
    """The gateway's metrics at one moment, summed over tenants (and models)."""

    t: float  # monotonic seconds
    responses: dict[str, float] = field(default_factory=dict)  # outcome -> count
    output_tokens: float = 0.0
    ttft: Histogram = field(default_factory=Histogram)
    overhead: Histogram = field(default_factory=Histogram)
    stages: dict[tuple[str, str], Histogram] = field(default_factory=dict)  # (pipeline, stage)
    caches: dict[tuple[str, str], float] = field(default_factory=dict)  # (cache, result)
    websocket_connections: float = 0.0
    active_responses: float = 0.0
    # Requests answered with an error (status 400 and up), by (status, code).
    refusals: dict[tuple[str, str], float] = field(default_factory=dict)

    @property
    def turns(self) -> float:
        return sum(self.responses.values())


def take_snapshot(families: Iterable[Metric], t: float) -> Snapshot:
    """Read what the dashboard needs from collected metric families, dropping every
    label it does not show (tenant and model above all)."""
    snap = Snapshot(t)
    histograms = {TTFT: lambda _labels: snap.ttft, OVERHEAD: lambda _labels: snap.overhead}

    def stage(labels: Mapping[str, str]) -> Histogram:
        return snap.stages.setdefault((labels["pipeline"], labels["stage"]), Histogram())

    histograms[STAGE] = stage
    for family in families:
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name == RESPONSES:
                outcome = labels["outcome"]
                snap.responses[outcome] = snap.responses.get(outcome, 0.0) + value
            elif name == TOKENS:
                if labels.get("type") == "output":
                    snap.output_tokens += value
            elif name == CACHE_LOOKUPS:
                key = (labels["cache"], labels["result"])
                snap.caches[key] = snap.caches.get(key, 0.0) + value
            elif name == WEBSOCKETS:
                snap.websocket_connections += value
            elif name == ACTIVE:
                snap.active_responses += value
            elif name == REQUESTS:
                if int(labels["status"]) >= 400:
                    key = (labels["status"], labels["code"])
                    snap.refusals[key] = snap.refusals.get(key, 0.0) + value
            else:
                base, _, suffix = name.rpartition("_")
                if base not in histograms:
                    continue
                histogram = histograms[base](labels)
                if suffix == "bucket":
                    le = float(labels["le"])
                    histogram.buckets[le] = histogram.buckets.get(le, 0.0) + value
                elif suffix == "sum":
                    histogram.sum += value
                elif suffix == "count":
                    histogram.count += value
    return snap


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


def _delta(later: float, earlier: float) -> float:
    """How much a counter grew (all of it after a reset)."""
    return later - earlier if later >= earlier else later


def _rate(later: float, earlier: float, seconds: float) -> float:
    return _delta(later, earlier) / seconds if seconds > 0 else 0.0


class Sampler:
    """A bounded ring of snapshots, and the page's view of it."""

    def __init__(self, interval_s: float = 2.0, keep_s: float = 300.0) -> None:
        self.interval_s = interval_s
        self.keep_s = keep_s
        self.ring: deque[Snapshot] = deque(maxlen=int(keep_s / interval_s) + 1)

    def add(self, snapshot: Snapshot) -> None:
        self.ring.append(snapshot)

    def clear(self) -> None:
        self.ring.clear()

    def _before(self, index: int, window_s: float) -> Snapshot | None:
        """The oldest snapshot at most ``window_s`` before the one at ``index`` (None if
        there is none: no rate yet)."""
        t = self.ring[index].t
        first = bisect.bisect_left(self.ring, t - window_s - 1e-9, key=lambda s: s.t)
        return self.ring[first] if first < index else None

    def view(self, stage_order: StageOrder | None = None) -> dict:
        """The page's JSON. Stages a pipeline of ``stage_order`` does not list follow its
        own, by name (each a step of its own)."""
        if not self.ring:
            return {"interval_s": self.interval_s, "window_s": self.keep_s, "empty": True}
        last = self.ring[-1]
        series: dict[str, Any] = {"t": [], "turns_per_s": []}
        for key in ("ttft_ms", "overhead_ms"):
            series[key] = {name: [] for name in QUANTILES}
        for index, snap in enumerate(self.ring):
            series["t"].append(round(snap.t - last.t, 3))
            earlier = self._before(index, RATE_WINDOW_S)
            series["turns_per_s"].append(
                None
                if earlier is None
                else round(_rate(snap.turns, earlier.turns, snap.t - earlier.t), 3)
            )
            earlier = self._before(index, QUANTILE_WINDOW_S)
            for key, of in (("ttft_ms", "ttft"), ("overhead_ms", "overhead")):
                window = None if earlier is None else getattr(snap, of).minus(getattr(earlier, of))
                for name, q in QUANTILES.items():
                    series[key][name].append(None if window is None else _ms(window.quantile(q)))
        return {
            "interval_s": self.interval_s,
            "window_s": self.keep_s,
            "sampled_s": round(last.t - self.ring[0].t, 3),
            "empty": False,
            "series": series,
            "now": self._now(last),
            "stages": self._stages(last, stage_order or {}),
            # Every stage a pipeline lists, in order: a stage's colour on the page.
            "stage_names": list(
                dict.fromkeys(name for stages in (stage_order or {}).values() for name, _ in stages)
            ),
            "caches": self._caches(last),
            "refusals": self._refusals(last),
        }

    def _now(self, last: Snapshot) -> dict[str, Any]:
        earlier = self._before(len(self.ring) - 1, RATE_WINDOW_S)

        def per_second(of: Callable[[Snapshot], float]) -> float | None:
            if earlier is None:
                return None
            return round(_rate(of(last), of(earlier), last.t - earlier.t), 3)

        errors = ("failed", "rejected", "error")
        return {
            "turns_total": round(last.turns),
            "errors_total": round(sum(last.responses.get(o, 0.0) for o in errors)),
            "refusals_total": round(sum(last.refusals.values())),
            "refusals_per_s": per_second(lambda s: sum(s.refusals.values())),
            "turns_per_s": per_second(lambda s: s.turns),
            "output_tokens_per_s": per_second(lambda s: s.output_tokens),
            "websocket_connections": round(last.websocket_connections),
            "active_responses": round(last.active_responses),
        }

    def _recent(self) -> Snapshot | None:
        return self._before(len(self.ring) - 1, RECENT_WINDOW_S)

    def _stages(self, last: Snapshot, order: StageOrder) -> list[dict[str, Any]]:
        """Mean time per stage over the most recent minute, per pipeline that ran."""
        earlier = self._recent()
        if earlier is None:
            return []
        pipelines: dict[str, dict[str, Histogram]] = {}
        for (pipeline, stage), histogram in last.stages.items():
            window = histogram.minus(earlier.stages.get((pipeline, stage), Histogram()))
            if window.count > 0:
                pipelines.setdefault(pipeline, {})[stage] = window
        names = [p for p in order if p in pipelines] + sorted(set(pipelines) - set(order))
        return [_pipeline_view(p, pipelines[p], dict(order.get(p, ()))) for p in names]

    def _refusals(self, last: Snapshot) -> list[dict[str, Any]]:
        """Requests answered with an error, by status and code: over the most recent
        minute and since the start, the most frequent this minute first."""
        earlier = self._recent()
        shown = [
            {
                "status": int(status),
                "code": code or None,
                "recent": round(
                    _delta(total, earlier.refusals.get((status, code), 0.0)) if earlier else 0
                ),
                "total": round(total),
            }
            for (status, code), total in last.refusals.items()
        ]
        return sorted(shown, key=lambda r: (-r["recent"], -r["total"], r["status"]))

    def _caches(self, last: Snapshot) -> list[dict[str, Any]]:
        """Hit ratio per cache: over the most recent minute, and since the start."""
        earlier = self._recent()
        names = sorted({cache for cache, _ in last.caches}, key=_cache_order)
        shown = []
        for cache in names:
            hits, misses = (
                last.caches.get((cache, "hit"), 0.0),
                last.caches.get((cache, "miss"), 0.0),
            )
            recent_hits = recent_misses = 0.0
            if earlier is not None:
                recent_hits = _delta(hits, earlier.caches.get((cache, "hit"), 0.0))
                recent_misses = _delta(misses, earlier.caches.get((cache, "miss"), 0.0))
            shown.append(
                {
                    "cache": cache,
                    "recent": _ratio(recent_hits, recent_misses),
                    "total": _ratio(hits, misses),
                }
            )
        return shown


def _pipeline_view(
    pipeline: str, stages: dict[str, Histogram], known: dict[str, int]
) -> dict[str, Any]:
    """One pipeline's stages in its own order (the model's apart): ``known`` maps each
    stage it lists to its step (None for the others)."""
    names = [s for s in known if s in stages] + sorted(set(stages) - set(known))
    return {
        "pipeline": pipeline,
        "turns": round(max(h.count for h in stages.values())),
        "stages": [
            {
                "stage": name,
                "mean_ms": _ms(stages[name].mean()),
                "p50_ms": _ms(stages[name].quantile(0.5)),
                "step": known.get(name),
            }
            for name in names
            if name not in MODEL_STAGES
        ],
        "model": [
            {"stage": name, "mean_ms": _ms(stages[name].mean())}
            for name in names
            if name in MODEL_STAGES
        ],
    }


def _ratio(hits: float, misses: float) -> dict[str, Any]:
    lookups = hits + misses
    return {
        "hits": round(hits),
        "lookups": round(lookups),
        "ratio": round(hits / lookups, 4) if lookups > 0 else None,
    }


def _cache_order(cache: str) -> tuple[int, str]:
    return (metrics.CACHES.index(cache) if cache in metrics.CACHES else len(metrics.CACHES), cache)
