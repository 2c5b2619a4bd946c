"""The limiters' counters, bound once per label (admission is on the hot path)."""

from __future__ import annotations

from turnpike.gateway import metrics

_REFUSALS = {
    reason: metrics.RATE_LIMITED.labels(reason)
    for reason in ("budget", "requests", "tokens", "concurrency", "connections")
}


def count_refusal(reason: str) -> None:
    _REFUSALS[reason].inc()
