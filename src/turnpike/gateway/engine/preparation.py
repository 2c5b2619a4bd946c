"""Preparing a create request: what the server sealed for the client opened, its PDFs
read, then a pipeline's stages (``turnpike.gateway.pipeline.variants``) run. Anything the
client must fix raises ``ApiError``, so a transport can still answer with a plain error."""

from __future__ import annotations

from turnpike.gateway.engine.timings import note_truncation
from turnpike.gateway.observability import turn_metrics
from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.pipeline.request_context import RequestContext
from turnpike.gateway.pipeline.stages import Resources
from turnpike.gateway.pipeline.variants import Pipeline
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.request import CreateRequest
from turnpike.gateway.protocol.response_object import new_response
from turnpike.gateway.sealed import compaction, encrypted_reasoning
from turnpike.gateway.upstream.pdf_text import read_pdfs
from turnpike.ids import new_id


async def prepare(
    request: CreateRequest, ctx: RequestContext, pipeline: Pipeline, res: Resources
) -> Prepared:
    prepared = Prepared(request, ctx, new_id("resp"))
    ctx.span.set_attribute("turnpike.response.id", prepared.response_id)
    ctx.span.set_attribute("turnpike.transport", ctx.transport)
    if request.safety_identifier:  # who the end user is, for abuse investigations
        ctx.span.set_attribute("turnpike.safety_identifier", request.safety_identifier)
    turn_metrics.response_started(ctx)
    try:
        open_sealed(res, request, ctx.tenant)
        await read_pdfs(request.input_items, res.pdf)
        await pipeline.prepare(prepared, res)
    except BaseException as err:
        model = prepared.model.id if prepared.model is not None else None
        turn_metrics.response_refused(ctx, model, err)
        # The admission slot is the caller's to give back (AdmissionControl.hold).
        # The client gets an error, not a response: the cached parent cannot be
        # trusted to match what the client will send next.
        if (
            isinstance(err, ApiError)
            and ctx.connection_cache is not None
            and request.previous_response_id
        ):
            ctx.connection_cache.evict_after_failure(request.previous_response_id, ctx.lane)
        raise
    assert prepared.model is not None
    prepared.response = new_response(
        prepared.response_id, request, prepared.model.id, prepared.safety_flags or ()
    )
    note_truncation(prepared)
    prepared.policy = pipeline.policy
    return prepared


def open_sealed(res: Resources, request: CreateRequest, tenant: str) -> None:
    """What the server sealed for the client, opened before any stage sees the input:
    compaction items become the items they hold, reasoning items get their text."""
    request.input_items = compaction.expand(res.sealer, tenant, request.input_items)
    encrypted_reasoning.open_items(res.sealer, tenant, request.input_items)
