"""The billing service's metrics (docs/observability.md, "Backend metrics"): what reaches
the ledger, and what its group commits cost."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from turnpike.metrics import API_SECONDS

# Events per commit: one alone when the ledger is idle, more under load (at most a
# thousand per call, several calls per commit).
BATCH_SIZES = tuple(float(2**power) for power in range(13))

EVENTS_RECORDED = Counter(
    "turnpike_billing_events_recorded",
    "Usage events newly written to the ledger (committed and synced).",
)
REDELIVERIES_IGNORED = Counter(
    "turnpike_billing_duplicates_ignored",
    "Usage events already in the ledger (a redelivery), acknowledged without a change.",
)
EVENTS_REJECTED = Counter(
    "turnpike_billing_events_rejected",
    "Usage events refused as invalid (a call with one invalid event, or over the batch "
    "limit, is refused whole: every event of it counts).",
)
COMMIT_BATCH_SIZE = Histogram(
    "turnpike_billing_commit_batch_size",
    "Events per group commit (one transaction and one sync for every event waiting).",
    buckets=BATCH_SIZES,
)
COMMIT_SECONDS = Histogram(
    "turnpike_billing_commit",
    "Time of one group commit on the ledger thread: the transaction and its sync.",
    unit="seconds",
    buckets=API_SECONDS,
)
