"""HTTP routes of ``/v1/conversations``: conversations (create, retrieve, update their
metadata, delete) and their items (list in pages, add, retrieve, delete).

Stored by the gateway's ``ConversationStore`` and scoped by tenant: another tenant's
conversation is not found, as one that never existed. Items are validated as a create
request's ``input`` is, and stored in the canonical shape with an id each. A response
created with ``conversation`` appends its input and output here (``turnpike.gateway.engine.after_turn``).
Items that would take a conversation past its bounds (``turnpike.gateway.state.conversation_bounds``) are
refused whole: a 400 ``conversation_too_large``.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from turnpike.gateway.api.http_endpoints import gateway_of, int_param, read_body
from turnpike.gateway.api.json_response import JSONResponse
from turnpike.gateway.protocol.errors import ApiError, echo, invalid, invalid_type, not_found
from turnpike.gateway.protocol.items import Item, normalize_input
from turnpike.gateway.protocol.json_codec import parse_json
from turnpike.gateway.protocol.request import parse_metadata
from turnpike.gateway.state.conversation_bounds import ConversationTooLarge
from turnpike.gateway.state.conversations import (
    ConversationStore,
    StoredConversation,
    new_conversation,
)
from turnpike.gateway.upstream.pdf_text import read_pdfs

router = APIRouter()

# Items one request may add (on create, or to an existing conversation), as the API.
MAX_ITEMS_PER_REQUEST = 20


def _store_and_tenant(request: Request) -> tuple[ConversationStore, str]:
    gw = gateway_of(request)
    return gw.engine.res.conversations, gw.keys.tenant_for(request.headers)


async def _body(request: Request) -> dict[str, Any]:
    raw = await read_body(request, gateway_of(request).settings.max_body_bytes)
    body = parse_json(raw) if raw.strip() else {}
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_body")
    return body


def _conversation_not_found(conversation_id: str) -> ApiError:
    return not_found(
        f"Conversation with id {echo(conversation_id)} not found.",
        "conversation_id",
        "conversation_not_found",
    )


def _items(raw: Any, *, required: bool) -> list[Item]:
    if raw is None and not required:
        return []
    if not isinstance(raw, list):
        raise invalid_type("items", "an array of input items")
    if required and not raw:
        raise invalid(
            "Invalid 'items': empty array. Expected an array with minimum length 1.",
            "items",
            "empty_array",
        )
    if len(raw) > MAX_ITEMS_PER_REQUEST:
        raise invalid(
            f"Invalid 'items': array too long. Expected an array with maximum length "
            f"{MAX_ITEMS_PER_REQUEST}, but got an array with length {len(raw)} instead.",
            "items",
            "array_above_max_length",
        )
    return normalize_input(raw, "items")


def _item_list(data: list[Item], has_more: bool = False) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


async def _conversation(
    store: ConversationStore, tenant: str, conversation_id: str
) -> StoredConversation:
    conversation = await store.get(tenant, conversation_id)
    if conversation is None:
        raise _conversation_not_found(conversation_id)
    return conversation


@router.post("/v1/conversations")
async def create_conversation(request: Request) -> Response:
    store, tenant = _store_and_tenant(request)
    body = await _body(request)
    items = _items(body.get("items"), required=False)
    await read_pdfs(items, gateway_of(request).engine.res.pdf)
    conversation = new_conversation(parse_metadata(body.get("metadata")))
    try:
        await store.create(tenant, conversation, items)
    except ConversationTooLarge as err:
        raise err.api_error("The new conversation", "items") from None
    return JSONResponse(conversation.to_json())


@router.get("/v1/conversations/{conversation_id}")
async def get_conversation(conversation_id: str, request: Request) -> Response:
    store, tenant = _store_and_tenant(request)
    return JSONResponse((await _conversation(store, tenant, conversation_id)).to_json())


@router.post("/v1/conversations/{conversation_id}")
async def update_conversation(conversation_id: str, request: Request) -> Response:
    store, tenant = _store_and_tenant(request)
    body = await _body(request)
    if "metadata" not in body:
        raise invalid(
            "Missing required parameter: 'metadata'.", "metadata", "missing_required_parameter"
        )
    updated = await store.update(tenant, conversation_id, parse_metadata(body["metadata"]))
    if updated is None:
        raise _conversation_not_found(conversation_id)
    return JSONResponse(updated.to_json())


@router.delete("/v1/conversations/{conversation_id}")
async def delete_conversation(conversation_id: str, request: Request) -> Response:
    store, tenant = _store_and_tenant(request)
    if not await store.delete(tenant, conversation_id):
        raise _conversation_not_found(conversation_id)
    return JSONResponse({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


@router.get("/v1/conversations/{conversation_id}/items")
async def list_items(conversation_id: str, request: Request) -> Response:
    store, tenant = _store_and_tenant(request)
    limit = int_param(request, "limit", 20, 1, 100)
    order = request.query_params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid("Invalid 'order': expected 'asc' or 'desc'.", "order", "invalid_value")
    items = await store.items(tenant, conversation_id)
    if items is None:
        raise _conversation_not_found(conversation_id)
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if (after := request.query_params.get("after")) is not None:
        position = next((i for i, item in enumerate(ordered) if item["id"] == after), None)
        if position is None:
            raise invalid(
                f"No item with id {echo(after)} in conversation {echo(conversation_id)}.",
                "after",
                "invalid_value",
            )
        start = position + 1
    page = ordered[start : start + limit]
    return JSONResponse(_item_list(page, has_more=start + limit < len(ordered)))


@router.post("/v1/conversations/{conversation_id}/items")
async def add_items(conversation_id: str, request: Request) -> Response:
    store, tenant = _store_and_tenant(request)
    items = _items((await _body(request)).get("items"), required=True)
    await read_pdfs(items, gateway_of(request).engine.res.pdf)
    try:
        found = await store.append(tenant, conversation_id, items)
    except ConversationTooLarge as err:
        what = f"With these {len(items)} items, conversation {echo(conversation_id)}"
        raise err.api_error(what, "items") from None
    if not found:
        raise _conversation_not_found(conversation_id)
    return JSONResponse(_item_list(items))


@router.get("/v1/conversations/{conversation_id}/items/{item_id}")
async def get_item(conversation_id: str, item_id: str, request: Request) -> Response:
    store, tenant = _store_and_tenant(request)
    items = await store.items(tenant, conversation_id)
    if items is None:
        raise _conversation_not_found(conversation_id)
    for item in items:
        if item["id"] == item_id:
            return JSONResponse(item)
    raise _item_not_found(item_id)


def _item_not_found(item_id: str) -> ApiError:
    return not_found(f"Item with id {echo(item_id)} not found.", "item_id", "item_not_found")


@router.delete("/v1/conversations/{conversation_id}/items/{item_id}")
async def delete_item(conversation_id: str, item_id: str, request: Request) -> Response:
    store, tenant = _store_and_tenant(request)
    deleted = await store.delete_item(tenant, conversation_id, item_id)
    if deleted is None:
        raise _conversation_not_found(conversation_id)
    if not deleted:
        raise _item_not_found(item_id)
    return JSONResponse((await _conversation(store, tenant, conversation_id)).to_json())
