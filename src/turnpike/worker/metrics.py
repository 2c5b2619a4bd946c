"""The worker's metrics (docs/observability.md, "Backend metrics"), by backend (``backend_names``).

Recorded once per request, never per token: the server moves a request from waiting to
running at its first delta and reads its ``Finished`` event (usage and timings) at the end;
the simulator counts its prefix-cache lookups where it makes them. Every series of a
backend is bound once, at import.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from turnpike.backend_names import BACKEND_NAMES, SIMULATOR
from turnpike.inference.v1 import inference_pb2 as pb

# Tokens per second of prefill: a follow-up that prefills a hundred new tokens behind the
# model's fixed time to first token runs at a few thousand, a long new prompt at the
# backend's full rate.
PREFILL_RATE_BUCKETS = (
    100.0,
    250.0,
    500.0,
    1_000.0,
    2_500.0,
    5_000.0,
    10_000.0,
    20_000.0,
    50_000.0,
    100_000.0,
    250_000.0,
    500_000.0,
    1_000_000.0,
)
# Tokens per second of decode: the simulator's speeds (65, 1,000, 4,000) and hosted models'.
DECODE_RATE_BUCKETS = (
    10.0,
    25.0,
    50.0,
    75.0,
    100.0,
    150.0,
    250.0,
    500.0,
    750.0,
    1_000.0,
    1_500.0,
    2_000.0,
    3_000.0,
    4_000.0,
    5_000.0,
    7_500.0,
    10_000.0,
)

PREFILL_TOKENS = Counter(
    "turnpike_worker_prefill_tokens",
    "Prompt tokens prefilled by finished requests: input tokens (images included) minus "
    "those served from the prefix cache.",
    ["backend"],
)
OUTPUT_TOKENS = Counter(
    "turnpike_worker_output_tokens",
    "Output tokens of finished requests.",
    ["backend"],
)
PREFILL_RATE = Histogram(
    "turnpike_worker_prefill_tokens_per_second",
    "Per finished request that prefilled tokens: prompt tokens prefilled over its prefill "
    "time (the model's fixed time to first token included).",
    ["backend"],
    buckets=PREFILL_RATE_BUCKETS,
)
DECODE_RATE = Histogram(
    "turnpike_worker_decode_tokens_per_second",
    "Per finished request with output after its first delta: those tokens over the time "
    "from the first delta to the last (or the backend's own decode time, if it reports one).",
    ["backend"],
    buckets=DECODE_RATE_BUCKETS,
)
PREFIX_CACHE_LOOKUPS = Counter(
    "turnpike_worker_prefix_cache_lookups",
    "Lookups of the worker's prefix cache, one per request, by result: hit (at least one "
    "block of the prompt was cached) or miss.",
    ["backend", "result"],
)
PREFIX_CACHE_HIT_TOKENS = Counter(
    "turnpike_worker_prefix_cache_hit_tokens",
    "Prompt tokens served from the worker's prefix cache (not prefilled).",
    ["backend"],
)
QUEUE_DEPTH = Gauge(
    "turnpike_worker_queue_depth",
    "Requests waiting for their first token: being prepared, prefilling, or (hosted "
    "backends) in the backend's queue or waiting out a rate limit.",
    ["backend"],
    multiprocess_mode="livesum",
)
RUNNING_REQUESTS = Gauge(
    "turnpike_worker_running_requests",
    "Requests streaming output (past their first token, not yet finished).",
    ["backend"],
    multiprocess_mode="livesum",
)


class RequestMetrics:
    """One backend's per-request series, labels bound once. A request is waiting from its
    arrival (``waiting.inc()``) to its first token (``started``), then running until it
    ``ended``."""

    def __init__(self, backend: str) -> None:
        self.waiting = QUEUE_DEPTH.labels(backend)
        self._running = RUNNING_REQUESTS.labels(backend)
        self._prefill_tokens = PREFILL_TOKENS.labels(backend)
        self._output_tokens = OUTPUT_TOKENS.labels(backend)
        self._prefill_rate = PREFILL_RATE.labels(backend)
        self._decode_rate = DECODE_RATE.labels(backend)

    def started(self) -> None:
        self.waiting.dec()
        self._running.inc()

    def ended(self, last: pb.GenerateEvent | None, first_tokens: int) -> None:
        """The stream ended after ``last`` (a ``Finished`` event, when it finished), its
        first delta holding ``first_tokens`` (0: no output)."""
        (self._running if first_tokens else self.waiting).dec()
        if last is not None and last.HasField("finished"):
            self._finished(last.finished, first_tokens)

    def _finished(self, finished: pb.Finished, first_tokens: int) -> None:
        usage, timings = finished.usage, finished.timings
        prefilled = max(0, usage.input_tokens - usage.cached_tokens)
        self._prefill_tokens.inc(prefilled)
        self._output_tokens.inc(usage.output_tokens)
        if prefilled and timings.prefill_ms > 0:
            self._prefill_rate.observe(prefilled * 1000.0 / timings.prefill_ms)
        # decode_ms runs from the first delta to the last: the tokens after the first
        # delta's (a late first wake-up finds several due at once).
        decoded = usage.output_tokens - first_tokens
        if decoded > 0 and timings.decode_ms > 0:
            self._decode_rate.observe(decoded * 1000.0 / timings.decode_ms)


class PrefixCacheMetrics:
    """Lookups of one backend's prefix cache, labels bound once."""

    def __init__(self, backend: str) -> None:
        self._hits = PREFIX_CACHE_LOOKUPS.labels(backend, "hit")
        self._misses = PREFIX_CACHE_LOOKUPS.labels(backend, "miss")
        self._hit_tokens = PREFIX_CACHE_HIT_TOKENS.labels(backend)

    def lookup(self, cached_tokens: int) -> None:
        if cached_tokens:
            self._hits.inc()
            self._hit_tokens.inc(cached_tokens)
        else:
            self._misses.inc()


REQUESTS = {name: RequestMetrics(name) for name in BACKEND_NAMES}
# Only the simulator keeps a prefix cache in the worker; a hosted backend's cache is its own
# (its cached tokens still count, as prompt tokens not prefilled).
SIMULATOR_PREFIX_CACHE = PrefixCacheMetrics(SIMULATOR)

CONTINUATIONS = Counter(
    "turnpike_worker_continuations",
    "Requests sent as continuations of a kept one (only what is new), by result: resolved "
    "(rebuilt whole from it) or unknown (not kept here: the caller sends it whole).",
    ["result"],
)
KEPT_BYTES = Gauge(
    "turnpike_worker_kept_bytes",
    "Bytes of the requests kept for their conversations' next turns (turnpike.worker."
    "continuations).",
    multiprocess_mode="livesum",
)
