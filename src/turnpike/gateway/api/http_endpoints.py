"""HTTP adapter: JSON and Server-Sent Events over the engine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from turnpike.billing.v1 import billing_pb2
from turnpike.gateway.api.json_response import JSONResponse
from turnpike.gateway.engine.event_queue import ResponseEventQueue
from turnpike.gateway.observability.tracing import response_span
from turnpike.gateway.observability.turn_metrics import overhead_header
from turnpike.gateway.pipeline.request_context import RequestContext
from turnpike.gateway.protocol import bounds
from turnpike.gateway.protocol.errors import (
    ApiError,
    conflict,
    echo,
    invalid,
    missing,
    not_found,
    too_large,
)
from turnpike.gateway.protocol.json_codec import dump_bytes, parse_json
from turnpike.gateway.protocol.request import parse_create
from turnpike.gateway.protocol.response_object import usage
from turnpike.gateway.state.responses import StoredResponse
from turnpike.gateway.wiring import Gateway
from turnpike.ids import new_id
from turnpike.router.v1 import router_pb2

router = APIRouter()
# How long a cancel waits for another replica to finish the response.
CANCEL_WAIT_S = 10.0


def gateway_of(request: Request) -> Gateway:
    return request.app.state.gateway


async def read_body(request: Request, limit: int) -> bytes:
    """The body, refusing anything over ``limit`` bytes before reading it all."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise too_large(limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def parse_bounded(gw: Gateway, raw: bytes) -> Any:
    """A create body parsed, within the bounds on input (turnpike.gateway.protocol.bounds)."""
    body = parse_json(raw)
    bounds.check_create(body, len(raw), gw.settings.max_input_chars)
    return body


def sse(event: dict[str, Any]) -> bytes:
    return b"event: " + event["type"].encode() + b"\ndata: " + dump_bytes(event) + b"\n\n"


async def sse_stream(queue: ResponseEventQueue) -> AsyncIterator[bytes]:
    try:
        async for event in queue.events():
            yield sse(event)
        # The Open Responses spec ends streams with [DONE]; the SDK accepts it.
        yield b"data: [DONE]\n\n"
    finally:
        queue.abandon()  # the client left (or the stream ended: then it changes nothing)


@router.post("/v1/responses")
async def create_response(request: Request) -> Response:
    arrived = time.perf_counter()
    gw = gateway_of(request)
    tenant = gw.keys.tenant_for(request.headers)
    pipeline = gw.pipeline_for(request.headers, websocket=False)
    raw = await read_body(request, gw.settings.max_body_bytes)
    create = parse_create(parse_bounded(gw, raw), default_model=gw.settings.default_model)
    transport = "sse" if create.stream else "http"
    ctx = RequestContext(
        tenant,
        pipeline.name,
        transport=transport,
        started=arrived,
        stage_spans=gw.settings.trace_stages,
    )
    limits = gw.keys.limits(tenant)
    async with gw.admission.hold(tenant, limits, create, len(raw)) as ctx.admission:
        with response_span(ctx, create.model):
            queue = gw.engine.start(await gw.engine.prepare(create, ctx, pipeline))
    if create.background and not create.stream:
        # Answer at once, once the response is stored; generation goes on without us.
        async for event in queue.events():
            if event["type"] != "response.created":
                return JSONResponse(event["response"], headers=ctx.admission.headers)
    if create.stream:
        # The headers leave before the turn ends: the overhead header holds the time so far
        # (preparation), the terminal event the whole turn's (docs/observability.md, metrics).
        return StreamingResponse(
            sse_stream(queue),
            media_type="text/event-stream",
            headers={
                "cache-control": "no-cache",
                "x-accel-buffering": "no",
                **ctx.admission.headers,
            },
        )
    final = await final_unless_left(request, queue)
    return JSONResponse(final, headers={**overhead_header(final), **ctx.admission.headers})


async def final_unless_left(request: Request, queue: ResponseEventQueue) -> dict[str, Any]:
    """A non-streamed response once it is done. Its client gets nothing before then, so
    only the connection tells that it left: the response is then abandoned as a stream's
    is (the worker stops, the response ends cancelled, what was generated is billed)."""

    async def abandon_once_left() -> None:
        # The body is read: uvicorn's receive() now waits until the connection drops
        # (or the response is sent), then answers http.disconnect.
        while (await request.receive())["type"] != "http.disconnect":
            pass
        queue.abandon()

    watcher = asyncio.create_task(abandon_once_left())
    try:
        async for _ in queue.events():
            pass
    finally:
        watcher.cancel()
    assert queue.final is not None
    return queue.final


def _response_not_found(response_id: str) -> ApiError:
    return not_found(
        f"Response with id {echo(response_id)} not found.", "response_id", "response_not_found"
    )


async def _stored(gw: Gateway, tenant: str, response_id: str) -> StoredResponse:
    record = await gw.store.get(tenant, response_id)
    if record is None:
        raise _response_not_found(response_id)
    return record


@router.get("/v1/responses/{response_id}")
async def get_response(response_id: str, request: Request) -> Response:
    gw = gateway_of(request)
    tenant = gw.keys.tenant_for(request.headers)
    record = await _stored(gw, tenant, response_id)
    if request.query_params.get("stream") == "true":
        return await _resume(gw, tenant, response_id, request)
    return JSONResponse(record.response)


async def _resume(gw: Gateway, tenant: str, response_id: str, request: Request) -> Response:
    """A background response's events after ``starting_after``, then the live ones."""
    starting_after = int_param(request, "starting_after", -1, -1, 2**31 - 1)
    events: AsyncIterator[dict[str, Any]]
    shared = gw.engine.background.shared
    if (buffered := gw.engine.background.buffer.get(tenant, response_id)) is not None:
        buffered.check(starting_after)
        events = buffered.follow(starting_after)
    elif shared is not None and (kept := await shared.events(tenant, response_id)) is not None:
        kept.check(starting_after)  # another replica runs it, or ran it
        events = shared.follow(tenant, response_id, kept, starting_after)
    else:
        raise invalid(
            "Only a background response can be streamed again, while its events are kept.",
            "stream",
            "unsupported_parameter",
        )

    async def stream() -> AsyncIterator[bytes]:
        async for event in events:
            yield sse(event)
        yield b"data: [DONE]\n\n"

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no"},
    )


@router.delete("/v1/responses/{response_id}")
async def delete_response(response_id: str, request: Request) -> Response:
    """A response still running is stopped first (what it generated is billed), and
    never stored again, whichever of delete, cancel and completion comes first."""
    gw = gateway_of(request)
    tenant = gw.keys.tenant_for(request.headers)
    running_here = gw.engine.live.mark_deleted(tenant, response_id)
    found = await gw.store.delete(tenant, response_id)
    if not (found or running_here):
        raise _response_not_found(response_id)
    if running_here:
        await gw.engine.stop(tenant, response_id, CANCEL_WAIT_S)
    elif gw.engine.background.shared is not None:
        # It may run on another replica, which then stops it; the store refuses to
        # keep it again (RedisResponseStore's tombstone).
        await gw.engine.background.shared.request_cancel(tenant, response_id)
    return JSONResponse({"id": response_id, "object": "response", "deleted": True})


@router.post("/v1/responses/{response_id}/cancel")
async def cancel_response(response_id: str, request: Request) -> Response:
    gw = gateway_of(request)
    tenant = gw.keys.tenant_for(request.headers)
    record = await _stored(gw, tenant, response_id)
    final = await gw.engine.background.cancel(tenant, response_id)
    if final is not None:
        return JSONResponse(final)
    response = record.response
    status = response["status"]
    if not response.get("background"):
        raise invalid(
            "Cannot cancel a synchronous response: only background responses can be cancelled.",
            "response_id",
            "not_cancellable",
        )
    if status == "cancelled":
        return JSONResponse(response)
    if status in ("queued", "in_progress") and gw.engine.background.shared is not None:
        return JSONResponse(await _cancel_elsewhere(gw, tenant, response_id))
    if status in ("queued", "in_progress"):
        raise conflict(
            "This response is generated by another gateway process, which cannot be reached to cancel it.",
            "response_id",
            "not_cancellable",
        )
    raise invalid(f"Cannot cancel a {status} response.", "response_id", "not_cancellable")


async def _cancel_elsewhere(gw: Gateway, tenant: str, response_id: str) -> dict[str, Any]:
    """Have the replica that runs the response cancel it, and wait until it is stored
    as finished."""
    assert gw.engine.background.shared is not None
    await gw.engine.background.shared.request_cancel(tenant, response_id)
    deadline = time.monotonic() + CANCEL_WAIT_S
    while time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        record = await _stored(gw, tenant, response_id)
        if record.response["status"] not in ("queued", "in_progress"):
            return record.response
    raise conflict(
        "The gateway process that generates this response did not answer the cancel.",
        "response_id",
        "not_cancellable",
    )


def int_param(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise invalid(f"Invalid '{name}': expected an integer.", name, "invalid_type") from None
    if not low <= value <= high:
        raise invalid(f"Invalid '{name}': expected {low} to {high}.", name, "invalid_value")
    return value


@router.get("/v1/responses/{response_id}/input_items")
async def list_input_items(response_id: str, request: Request) -> Response:
    gw = gateway_of(request)
    tenant = gw.keys.tenant_for(request.headers)
    limit = int_param(request, "limit", 20, 1, 100)
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid("Invalid 'order': expected 'asc' or 'desc'.", "order", "invalid_value")
    items = await gw.engine.input_items(tenant, response_id)
    if items is None:
        raise _response_not_found(response_id)
    if order == "desc":
        items = items[::-1]
    after = request.query_params.get("after")
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise invalid(
                f"No input item with id {echo(after)} in this response.", "after", "invalid_value"
            )
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return JSONResponse(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": len(items) > limit,
        }
    )


@router.post("/v1/responses/input_tokens")
async def count_input_tokens(request: Request) -> Response:
    gw = gateway_of(request)
    tenant = gw.keys.tenant_for(request.headers)
    body = parse_bounded(gw, await read_body(request, gw.settings.max_body_bytes))
    create = parse_create(body, default_model=gw.settings.default_model)
    count = await gw.engine.count_input_tokens(create, tenant)
    return JSONResponse({"object": "response.input_tokens", "input_tokens": count})


@router.post("/v1/responses/compact")
async def compact_response(request: Request) -> Response:
    """The request's history (``input``, after ``previous_response_id``'s) compacted:
    all of it sealed into exactly one ``compaction`` item (``turnpike.gateway.sealed.compaction``). Its
    usage is the tokens the whole history renders to."""
    gw = gateway_of(request)
    tenant = gw.keys.tenant_for(request.headers)
    body = parse_bounded(gw, await read_body(request, gw.settings.max_body_bytes))
    # Unlike a create (which falls back to the default model), compact requires its
    # model, as the spec's CompactResponseMethodPublicBody and the SDK's compact() do.
    if isinstance(body, dict) and body.get("model") is None:
        raise missing("model")
    create = parse_create(body, default_model=gw.settings.default_model)
    output, input_tokens = await gw.engine.compact(create, tenant)
    return JSONResponse(
        {
            "id": new_id("resp"),
            "object": "response.compaction",
            "created_at": int(time.time()),
            "output": output,
            "usage": usage(input_tokens, 0, 0),
        }
    )


def _model_object(model: router_pb2.ModelConfig) -> dict[str, Any]:
    return {"id": model.id, "object": "model", "created": model.created, "owned_by": model.owned_by}


@router.get("/v1/models")
async def list_models(request: Request) -> Response:
    gw = gateway_of(request)
    gw.keys.tenant_for(request.headers)
    models = await _models(gw)
    return JSONResponse({"object": "list", "data": [_model_object(m) for m in models]})


async def _models(gw: Gateway) -> list[router_pb2.ModelConfig]:
    router = gw.backends.router
    reply = await gw.backends.call("router", router.ListModels, router_pb2.ListModelsRequest())
    return list(reply.models)


@router.get("/v1/models/{model_id}")
async def get_model(model_id: str, request: Request) -> Response:
    gw = gateway_of(request)
    gw.keys.tenant_for(request.headers)
    for model in await _models(gw):
        if model.id == model_id:
            return JSONResponse(_model_object(model))
    raise not_found(f"The model {echo(model_id)} does not exist.", "model", "model_not_found")


@router.get("/v1/usage")
async def usage_totals(request: Request) -> Response:
    gw = gateway_of(request)
    tenant = gw.keys.tenant_for(request.headers)
    totals = await gw.backends.call(
        "billing", gw.backends.billing.GetUsage, billing_pb2.GetUsageRequest(tenant=tenant)
    )
    return JSONResponse(
        {
            "object": "usage",
            "tenant": tenant,
            "responses": totals.responses,
            "input_tokens": totals.input_tokens,
            "cached_tokens": totals.cached_tokens,
            "output_tokens": totals.output_tokens,
            "pending_events": gw.outbox.pending_for(tenant),
            "by_model": [
                {
                    "model": m.model,
                    "responses": m.responses,
                    "input_tokens": m.input_tokens,
                    "cached_tokens": m.cached_tokens,
                    "output_tokens": m.output_tokens,
                }
                for m in totals.by_model
            ],
        }
    )


@router.get("/healthz")
async def healthz() -> Response:
    return JSONResponse({"status": "ok"})


@router.get("/readyz")
async def readyz(request: Request) -> Response:
    ready, health = await gateway_of(request).readiness()
    return JSONResponse({"ready": ready, **health}, status_code=200 if ready else 503)


__all__ = ["ApiError", "router"]
