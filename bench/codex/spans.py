"""The gateway's span of each response, as the per-request record the benchmark counts
(pure: reads spans the receiver holds)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from bench.otlp import Span

RESPONSE_SPAN = "response.create"
# The attributes the gateway's response span carries (gateway/tracing.py).
TRANSPORT = "turnpike.transport"
OVERHEAD = "turnpike.overhead_ms"
TTFT = "turnpike.ttft_ms"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
CACHED_TOKENS = "gen_ai.usage.cache_read.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
RESPONSE_ID = "gen_ai.response.id"
EXPECTED = (TRANSPORT, OVERHEAD, TTFT, INPUT_TOKENS, CACHED_TOKENS, RESPONSE_ID)


@dataclass(frozen=True)
class Request:
    response_id: str
    transport: str  # sse, websocket or http
    start_ns: int
    gateway_ms: float  # the span's length: the response's whole time at the gateway
    overhead_ms: float | None
    ttft_ms: float | None
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    status: str

    @property
    def warmup(self) -> bool:
        """Codex's WebSocket warm-up (``generate: false``): no tokens in or out."""
        return self.input_tokens == 0 and self.output_tokens == 0


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def response_requests(spans: Iterable[Span]) -> list[Request]:
    """One record per response the gateway finished, in start order."""
    found = []
    for span in spans:
        attrs = span.attributes
        if span.service != "gateway" or span.name != RESPONSE_SPAN or RESPONSE_ID not in attrs:
            continue
        found.append(
            Request(
                response_id=str(attrs[RESPONSE_ID]),
                transport=str(attrs.get(TRANSPORT) or ""),
                start_ns=span.start_ns,
                gateway_ms=round((span.end_ns - span.start_ns) / 1e6, 3),
                overhead_ms=_number(attrs.get(OVERHEAD)),
                ttft_ms=_number(attrs.get(TTFT)),
                input_tokens=int(attrs.get(INPUT_TOKENS) or 0),
                cached_tokens=int(attrs.get(CACHED_TOKENS) or 0),
                output_tokens=int(attrs.get(OUTPUT_TOKENS) or 0),
                status=str(attrs.get("turnpike.response.status") or ""),
            )
        )
    return sorted(found, key=lambda r: r.start_ns)


def within(requests: Iterable[Request], start_ns: int, end_ns: int) -> list[Request]:
    """The requests that started in [start_ns, end_ns]: one task's, as tasks run one at a
    time."""
    return [r for r in requests if start_ns <= r.start_ns <= end_ns]


def missing_attributes(spans: Iterable[Span]) -> list[str]:
    """The attributes of ``EXPECTED`` that no gateway response span carried."""
    seen: set[str] = set()
    for span in spans:
        if span.service == "gateway" and span.name == RESPONSE_SPAN:
            seen.update(span.attributes)
    return [name for name in EXPECTED if name not in seen]
