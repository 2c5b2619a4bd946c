"""What one turn records when it ends: its outcome, time to first token, end-to-end time,
API overhead, stage times and tokens (turnpike.gateway.metrics), and the overhead figure every
client sees (the ``x-turnpike-overhead-ms`` header and the terminal event's ``turnpike``
field).

API overhead is the turn's time at the gateway, from the request's arrival to its
terminal event, minus the model's own time as the worker reports it (``total_ms``): what
Turnpike's services added to the turn. A turn the worker never finished has no model
time, so all of it counts.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from turnpike.gateway import metrics
from turnpike.gateway.protocol.errors import ApiError

if TYPE_CHECKING:
    from turnpike.gateway.pipeline.prepared import Prepared
    from turnpike.gateway.pipeline.request_context import RequestContext

OVERHEAD_HEADER = "x-turnpike-overhead-ms"
UNKNOWN_MODEL = "unknown"


def overhead_ms(ctx: RequestContext, model_ms: float, now: float | None = None) -> float:
    turn_ms = ((time.perf_counter() if now is None else now) - ctx.started) * 1000
    return max(0.0, turn_ms - model_ms)


def overhead_header(response: dict[str, Any]) -> dict[str, str]:
    """The header of a finished response: its overhead as the terminal event reports it."""
    timings = response.get("turnpike") or {}
    value = timings.get("overhead_ms")
    return {} if value is None else {OVERHEAD_HEADER: f"{value:.3f}"}


def response_started(ctx: RequestContext) -> None:
    metrics.ACTIVE_RESPONSES.labels(ctx.transport).inc()


def response_refused(ctx: RequestContext, model: str | None, error: BaseException) -> None:
    """Preparing the response failed: the client got an error, no response exists."""
    metrics.ACTIVE_RESPONSES.labels(ctx.transport).dec()
    client_fault = isinstance(error, ApiError) and error.status < 500
    outcome = "rejected" if client_fault else "error"
    metrics.RESPONSES.labels(
        model or UNKNOWN_MODEL, ctx.pipeline, ctx.transport, ctx.tenant, outcome
    ).inc()


def first_token(ctx: RequestContext) -> None:
    if ctx.first_token_at is None:
        ctx.first_token_at = time.perf_counter()


def response_finished(prepared: Prepared, model_ms: float, now: float) -> float:
    """Record a finished response (any status); returns its API overhead in ms."""
    ctx, response = prepared.ctx, prepared.response
    assert response is not None
    model = prepared.model.id if prepared.model is not None else UNKNOWN_MODEL
    pipeline, transport = ctx.pipeline, ctx.transport
    overhead = overhead_ms(ctx, model_ms, now)
    metrics.ACTIVE_RESPONSES.labels(transport).dec()
    metrics.RESPONSES.labels(model, pipeline, transport, ctx.tenant, response["status"]).inc()
    gen_ai = (metrics.GEN_AI_OPERATION, model, pipeline, transport)
    metrics.REQUEST_DURATION.labels(*gen_ai).observe(now - ctx.started)
    if ctx.first_token_at is not None:
        metrics.TIME_TO_FIRST_TOKEN.labels(*gen_ai).observe(ctx.first_token_at - ctx.started)
    if response["status"] in ("completed", "incomplete"):
        metrics.API_OVERHEAD.labels(model, pipeline, transport).observe(overhead / 1000)
    for stage, ms in ctx.stage_ms.items():
        metrics.STAGE_DURATION.labels(pipeline, stage).observe(ms / 1000)
    if usage := response.get("usage"):
        _tokens(usage, model, pipeline, ctx.tenant)
    return overhead


def _tokens(usage: dict[str, Any], model: str, pipeline: str, tenant: str) -> None:
    input_tokens, output_tokens = usage["input_tokens"], usage["output_tokens"]
    cached = (usage.get("input_tokens_details") or {}).get("cached_tokens", 0)
    for kind, count in (("input", input_tokens), ("cached", cached), ("output", output_tokens)):
        metrics.TOKENS.labels(model, pipeline, tenant, kind).inc(count)
    usage_by_type = metrics.TOKEN_USAGE
    usage_by_type.labels(metrics.GEN_AI_OPERATION, model, "input").observe(input_tokens)
    usage_by_type.labels(metrics.GEN_AI_OPERATION, model, "output").observe(output_tokens)
