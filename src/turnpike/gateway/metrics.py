"""The gateway's metrics: every name it exports, in one place (docs/observability.md, "Metrics").

Labels stay bounded: ``model`` is a model the router knows (``unknown`` before one is
resolved), ``tenant`` a tenant of the configured keys, ``pipeline`` one of three and
``transport`` one of http, sse, websocket. The GenAI conventions' metrics carry the
conventions' own attribute names.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from turnpike.metrics import API_SECONDS, TOKEN_COUNTS, TURN_SECONDS

# What a response ended as: completed, incomplete or failed once generation ran;
# rejected (a 4xx: the client must change the request) or error (a 5xx) when preparing
# it failed, so no response was created.
OUTCOMES = ("completed", "incomplete", "failed", "rejected", "error")
CACHES = ("connection", "token", "model")
VERDICTS = ("allow", "flag", "block")
GEN_AI_OPERATION = "chat"  # the conventions' gen_ai.operation.name for a Responses turn

REQUESTS = Counter(
    "turnpike_gateway_requests",
    "Every request by route (its template; a WebSocket event's type), transport, status "
    "and error code (empty on success): refusals too (turnpike.gateway.observability.access_log).",
    ["route", "transport", "status", "code"],
)
RESPONSES = Counter(
    "turnpike_gateway_responses",
    "Create requests by outcome.",
    ["model", "pipeline", "transport", "tenant", "outcome"],
)


def _turn_seconds(name: str, documentation: str) -> Histogram:
    labels = ["gen_ai_operation_name", "gen_ai_request_model", "pipeline", "transport"]
    return Histogram(name, documentation, labels, unit="seconds", buckets=TURN_SECONDS)


TIME_TO_FIRST_TOKEN = _turn_seconds(
    "gen_ai_server_time_to_first_token",
    "From the request's arrival to its first output token leaving the gateway.",
)
REQUEST_DURATION = _turn_seconds(
    "gen_ai_server_request_duration",
    "From the request's arrival to its terminal event (end to end).",
)
API_OVERHEAD = Histogram(
    "turnpike_gateway_api_overhead",
    "A turn's end-to-end time minus the model's own time (the worker's total_ms): "
    "what the API services added.",
    ["model", "pipeline", "transport"],
    unit="seconds",
    buckets=API_SECONDS,
)
STAGE_DURATION = Histogram(
    "turnpike_gateway_stage_duration",
    "Time of each pipeline stage of a response (generate includes the model).",
    ["pipeline", "stage"],
    unit="seconds",
    buckets=API_SECONDS,
)
TOKEN_USAGE = Histogram(
    "gen_ai_client_token_usage",
    "Tokens per response, by type (input, output), as the GenAI conventions count them.",
    ["gen_ai_operation_name", "gen_ai_request_model", "gen_ai_token_type"],
    buckets=TOKEN_COUNTS,
)
TOKENS = Counter(
    "turnpike_gateway_tokens",
    "Tokens of finished responses: input (cached included), cached, output.",
    ["model", "pipeline", "tenant", "type"],
)
WEBSOCKET_CONNECTIONS = Gauge(
    "turnpike_gateway_websocket_connections",
    "WebSocket connections open now.",
    multiprocess_mode="livesum",
)
ACTIVE_RESPONSES = Gauge(
    "turnpike_gateway_active_responses",
    "Responses being prepared or generated now.",
    ["transport"],
    multiprocess_mode="livesum",
)
ADMISSION_SLOTS = Gauge(
    "turnpike_gateway_admission_slots",
    "Admission slots held now (turnpike.gateway.tenancy.admission): one per response admitted and not yet "
    "released. Equal to the active responses whenever the gateway is idle; more is a leak.",
    multiprocess_mode="livesum",
)
CACHE_LOOKUPS = Counter(
    "turnpike_gateway_cache_lookups",
    "Lookups of the connection cache (previous_response_id on the socket), the TokenCache "
    "(rendered tokens) and the model configuration cache, by result (hit, miss).",
    ["cache", "result"],
)


class CacheLookups:
    """The hit and miss counters of one cache, bound once (lookups are on the hot path)."""

    def __init__(self, cache: str) -> None:
        self.hit = CACHE_LOOKUPS.labels(cache, "hit")
        self.miss = CACHE_LOOKUPS.labels(cache, "miss")

    def count(self, found: object) -> None:
        (self.miss if found is None else self.hit).inc()


BILLING_OUTBOX_BACKLOG = Gauge(
    "turnpike_gateway_billing_outbox_backlog",
    "Usage events waiting to reach billing.",
    multiprocess_mode="livesum",
)
BILLING_OUTBOX_RETRIES = Counter(
    "turnpike_gateway_billing_outbox_retries",
    "Deliveries of usage events to billing that failed and were tried again.",
)
SAFETY_VERDICTS = Counter(
    "turnpike_gateway_safety_verdicts",
    "Safety decisions on requests: allow, flag (served, marked) or block (refused).",
    ["pipeline", "verdict"],
)
RATE_LIMITED = Counter(
    "turnpike_gateway_rate_limited",
    "Requests refused by a tenant's limits, by the limit that refused: requests, tokens "
    "(per minute), budget, concurrency (responses in flight), connections (WebSocket).",
    ["reason"],
)
LIMITER_FALLBACKS = Counter(
    "turnpike_gateway_limiter_fallbacks",
    "Times the limiter lost Redis and fell back to limits per process.",
)
LIMITER_DEGRADED = Gauge(
    "turnpike_gateway_limiter_degraded",
    "1 while a gateway process enforces its limits alone (Redis unreachable), else 0.",
    multiprocess_mode="livesum",
)
SHED = Counter(
    "turnpike_gateway_shed",
    "Create requests refused with 503 server_overloaded, by reason: full (the process has "
    "its bound of responses in flight) or over_fair_share (busy, and the tenant holds more "
    "than its share).",
    ["reason"],
)
SESSION_STREAMS = Gauge(
    "turnpike_gateway_session_streams",
    "Session streams open now (one per client connection and per-turn service: safety, "
    "tokenizer; turnpike.gateway.upstream.sessions).",
    ["service"],
    multiprocess_mode="livesum",
)
SESSION_STREAM_BREAKS = Counter(
    "turnpike_gateway_session_stream_breaks",
    "Session streams that failed (the service restarted, a reply came late or out of "
    "order): the turns waiting on them asked by calls instead.",
    ["service"],
)
SESSION_EXCHANGES = Counter(
    "turnpike_gateway_session_exchanges",
    "Turns asked on session streams, by outcome: ok, refused (the request's error, as a "
    "call would have had it), broken (asked again by a call).",
    ["service", "outcome"],
)
ADMISSION_LIMIT = Gauge(
    "turnpike_gateway_admission_limit",
    "Responses a gateway process admits at once now: the adaptive limit "
    "(turnpike.gateway.tenancy.adaptive_limit) under TURNPIKE_MAX_IN_FLIGHT, or that bound "
    "fixed; 0 with shedding off. Summed over the processes of a host.",
    multiprocess_mode="livesum",
)
ADMISSION_LATENCY = Gauge(
    "turnpike_gateway_admission_latency",
    "The adaptive limit's signal: the median time to first token (from admission to the "
    "first output token leaving) of its last window of responses. The highest of a host's "
    "processes.",
    unit="seconds",
    multiprocess_mode="livemax",
)
ADMISSION_BASELINE = Gauge(
    "turnpike_gateway_admission_baseline",
    "The adaptive limit's baseline: the lowest window median of time to first token among "
    "its recent windows, the wait it holds the signal near. The lowest of a host's processes.",
    unit="seconds",
    multiprocess_mode="livemin",
)
