"""The router's metrics (docs/observability.md, "Backend metrics"): how it chose workers,
and how many are up. Labels bound once, here."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

DECISIONS = Counter(
    "turnpike_router_decisions",
    "Routes by how the worker was chosen: affinity_hit (the conversation's own worker), "
    "least_loaded (a fresh pick) or failover (a pick that excluded a worker the caller "
    "named, or moved a conversation off its worker because it was down or excluded).",
    ["decision"],
)
WORKERS = Gauge(
    "turnpike_router_workers",
    "Configured workers by health: healthy (answering SERVING, given traffic) or unhealthy "
    "(down, draining, or not yet checked).",
    ["state"],
    multiprocess_mode="livesum",
)

AFFINITY_HIT = DECISIONS.labels("affinity_hit")
LEAST_LOADED = DECISIONS.labels("least_loaded")
FAILOVER = DECISIONS.labels("failover")
HEALTHY = WORKERS.labels("healthy")
UNHEALTHY = WORKERS.labels("unhealthy")


def publish_health(healthy: int, total: int) -> None:
    HEALTHY.set(healthy)
    UNHEALTHY.set(total - healthy)
