"""Who asked and how: one request's tenant, pipeline name, transport, WebSocket lane and
connection cache, its span, when it arrived and the time each stage took."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from opentelemetry import trace

from turnpike.gateway.protocol.injection import InjectInbox
from turnpike.gateway.protocol.steering import SteerSignal
from turnpike.gateway.state.connection_cache import ConnectionCache
from turnpike.telemetry import is_noop

if TYPE_CHECKING:
    from turnpike.gateway.tenancy.admission import Pass
    from turnpike.gateway.upstream.sessions import ConnectionStreams

tracer = trace.get_tracer("turnpike.gateway")


@dataclass
class RequestContext:
    tenant: str
    pipeline: str  # the name of the pipeline that prepares it (traces and timings)
    transport: str = "http"  # http (one JSON body), sse or websocket (metrics, traces)
    connection_cache: ConnectionCache | None = None  # WebSocket mode only
    # The WebSocket's session streams to safety and the tokenizer (None: calls only).
    streams: ConnectionStreams | None = None
    lane: str | None = None  # WebSocket stream_id
    steering: SteerSignal | None = None  # WebSocket mode only (turnpike.gateway.protocol.steering)
    # A multi_agent response's, on a connection with the beta (turnpike.gateway.protocol.injection).
    injection: InjectInbox | None = None
    stage_ms: dict[str, float] = field(default_factory=dict)
    # A span per stage (TURNPIKE_TRACE_STAGES); without, its time is on the response's span.
    stage_spans: bool = True
    # The response's own span (turnpike.gateway.observability.tracing.response_span); the engine ends it.
    span: trace.Span = trace.INVALID_SPAN
    # When the request arrived and when its first output token left (perf_counter): the
    # turn's time, its time to first token and so its API overhead are measured from here.
    started: float = field(default_factory=time.perf_counter)
    first_token_at: float | None = None
    # Admission's pass (turnpike.gateway.tenancy.admission): released, with the tokens used, when the
    # response ends or its preparation fails.
    admission: Pass | None = None

    @contextmanager
    def stage(self, name: str) -> Iterator[trace.Span]:
        """Time a stage and give it a span, so one trace shows where time went."""
        start = time.perf_counter()
        if not self.stage_spans or is_noop(tracer):
            yield trace.get_current_span()
        else:
            with tracer.start_as_current_span(f"stage.{name}") as span:
                span.set_attribute("turnpike.pipeline", self.pipeline)
                yield span
        self.stage_ms[name] = self.stage_ms.get(name, 0.0) + (time.perf_counter() - start) * 1000
