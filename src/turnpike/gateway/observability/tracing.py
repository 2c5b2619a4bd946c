"""The gateway's spans: how FastAPI traces HTTP requests, and one span per response.

A response outlives the code that asked for it (generation runs in a task of its own and
finishes even when the client goes away), so its span is started here, made current
while the response is prepared and while it is generated, and ended by the engine when
the response is finished. With tracing off every call here is a no-op on the API's
non-recording span.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from turnpike.gateway.metrics import GEN_AI_OPERATION
from turnpike.gateway.protocol.errors import ApiError
from turnpike.telemetry import is_noop

if TYPE_CHECKING:
    from fastapi.telemetry import TelemetryConfig

    from turnpike.gateway.pipeline.request_context import RequestContext

tracer = trace.get_tracer("turnpike.gateway")

# Where Codex puts the W3C trace context of a turn in ``client_metadata`` (a WebSocket
# message has no headers of its own).
CLIENT_TRACEPARENT = "ws_request_header_traceparent"
CLIENT_TRACESTATE = "ws_request_header_tracestate"
_W3C = TraceContextTextMapPropagator()

UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/dashboard", "/dashboard/data"})


def _untraced(scope: MutableMapping[str, Any]) -> bool:
    # Probes are noise. A WebSocket connection carries many responses and may live for
    # an hour: each response gets a trace of its own instead of one per connection.
    return scope["type"] == "websocket" or scope.get("path") in UNTRACED_PATHS


# FastAPI's native telemetry (used only once a tracer provider is installed): a server
# span per HTTP request, parented by an incoming ``traceparent``. Export is configured by
# ``turnpike.telemetry`` alone, from the OTEL_* variables.
FASTAPI_TELEMETRY: TelemetryConfig = {
    "tracing": True,
    "operation_spans": False,
    "metrics": False,
    "logs": False,
    "auto_configure": False,
    "exclude": _untraced,
}


def client_trace_context(client_metadata: Mapping[str, str]) -> Any:
    """The OpenTelemetry context of the client's span named in ``client_metadata``, or
    None when it names none (or an invalid one: it is ignored, as a bad header is)."""
    parent = client_metadata.get(CLIENT_TRACEPARENT)
    if not parent:
        return None
    carrier = {"traceparent": parent}
    state = client_metadata.get(CLIENT_TRACESTATE)
    if state:
        carrier["tracestate"] = state
    context = _W3C.extract(carrier)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


@contextmanager
def response_span(
    ctx: RequestContext, model: str, client_metadata: Mapping[str, str] | None = None
) -> Iterator[trace.Span]:
    """The span of one response, current inside the block and kept in ``ctx.span``.

    If the block raises (preparation failed), the span ends here. Otherwise the block
    must end with ``ResponseEngine.start``, and the engine ends it when it finishes the
    response. Under an HTTP request's span it is a child; on a WebSocket, a root, or,
    when ``client_metadata`` carries a traceparent, a child of the client's span.
    """
    if is_noop(tracer):  # tracing off: the API's invalid span, nothing to make current
        ctx.span = trace.INVALID_SPAN
        yield trace.INVALID_SPAN
        return
    root = not trace.get_current_span().get_span_context().is_valid
    # Only without a request span: over HTTP, the request's own traceparent header
    # already parents the request span this one sits under.
    parent = client_trace_context(client_metadata or {}) if root else None
    span = tracer.start_span(
        "response.create",
        context=parent,
        kind=SpanKind.SERVER if root else SpanKind.INTERNAL,
        attributes={
            "turnpike.transport": ctx.transport,
            "turnpike.tenant": ctx.tenant,
            "turnpike.pipeline": ctx.pipeline,
            "turnpike.model": model,
            # The OpenTelemetry GenAI conventions' names, which GenAI-aware backends read.
            "gen_ai.operation.name": GEN_AI_OPERATION,
            "gen_ai.request.model": model,
        },
    )
    ctx.span = span
    try:
        with trace.use_span(
            span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        ):
            yield span
    except BaseException as exc:
        _record_failure(span, exc)
        span.end()
        raise


def _record_failure(span: trace.Span, exc: BaseException) -> None:
    if not span.is_recording():
        return
    if isinstance(exc, ApiError):
        span.set_attribute("turnpike.error.code", exc.code or exc.type)
        span.set_attribute("http.response.status_code", exc.status)
        # A request the client must fix is not the server's failure.
        if exc.status < 500:
            return
        span.set_attribute("error.type", exc.code or str(exc.status))
        span.set_status(Status(StatusCode.ERROR, exc.message))
    elif isinstance(exc, asyncio.CancelledError):
        span.set_attribute("error.type", "cancelled")
        span.set_status(Status(StatusCode.ERROR, "cancelled before the response started"))
    else:
        span.record_exception(exc)
        span.set_attribute("error.type", type(exc).__qualname__)
        span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))


def end_response_span(
    span: trace.Span, response: dict[str, Any], stage_ms: Mapping[str, float] | None = None
) -> None:
    """End a response's span with its outcome and its stages' times (called once the
    response is final)."""
    if span.is_recording():
        span.set_attribute("turnpike.response.status", response["status"])
        span.set_attribute("gen_ai.response.id", response["id"])
        span.set_attribute("gen_ai.response.model", response["model"])
        if usage := response.get("usage"):
            span.set_attribute("gen_ai.usage.input_tokens", usage["input_tokens"])
            span.set_attribute("gen_ai.usage.output_tokens", usage["output_tokens"])
            cached = (usage.get("input_tokens_details") or {}).get("cached_tokens")
            if cached is not None:
                span.set_attribute("gen_ai.usage.cache_read.input_tokens", cached)
        # What the turn cost at the gateway (engine: the terminal event's timings), and
        # each stage's part (their spans are only made with TURNPIKE_TRACE_STAGES).
        timings = response.get("turnpike") or {}
        for key in ("overhead_ms", "ttft_ms"):
            if (value := timings.get(key)) is not None:
                span.set_attribute(f"turnpike.{key}", value)
        for stage, ms in (stage_ms or {}).items():
            span.set_attribute(f"turnpike.stage.{stage}_ms", round(ms, 3))
        if response["status"] == "failed":
            error = response.get("error") or {}
            span.set_attribute("error.type", error.get("code") or "failed")
            span.set_status(Status(StatusCode.ERROR, error.get("message")))
    span.end()
