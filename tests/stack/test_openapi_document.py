"""The gateway's OpenAPI document (src/turnpike/gateway/api/openapi.json): current with its
sources, valid OpenAPI, listing exactly the routes the app has, and served."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import schemathesis
from fastapi.routing import APIRoute, APIWebSocketRoute
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012
from support.openapi_operations import operations
from support.procs import REPO_ROOT
from support.scripts import load_script

from turnpike.gateway.api.app import create_app
from turnpike.gateway.api.openapi import DOCUMENT_PATH

gen_openapi = load_script("gen_openapi", REPO_ROOT / "scripts" / "gen_openapi.py")
HTTP_METHODS = {"get", "post", "put", "patch", "delete", "head", "options"}


def document() -> dict:
    return json.loads(DOCUMENT_PATH.read_text())


def test_the_committed_document_is_current() -> None:
    assert DOCUMENT_PATH.read_text() == gen_openapi.render(), (
        "src/turnpike/gateway/api/openapi.json is stale: run `make openapi`"
    )


def test_the_document_is_valid_openapi() -> None:
    schema = schemathesis.openapi.from_dict(document())
    # Loading resolves every reference; each operation must come out whole.
    assert len(operations(schema)) == sum(
        1 for item in document()["paths"].values() for method in item if method in HTTP_METHODS
    )


def flat_routes(routes: list, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(full path, route) of every route, included routers walked (this FastAPI keeps
    them as one entry each, with their own routes inside)."""
    for route in routes:
        if (inner := getattr(route, "original_router", None)) is not None:
            yield from flat_routes(inner.routes, prefix + route.include_context.prefix)
        else:
            yield prefix + route.path, route


def test_it_lists_every_route_of_the_app_and_no_other() -> None:
    routes = list(flat_routes(create_app().routes))
    served = {
        (path, method.lower())
        for path, route in routes
        if isinstance(route, APIRoute)
        for method in (route.methods or set()) - {"HEAD"}
    }
    sockets = {path for path, route in routes if isinstance(route, APIWebSocketRoute)}
    assert served and sockets
    paths = document()["paths"]
    listed = {
        (path, method) for path, item in paths.items() for method in item if method in HTTP_METHODS
    }
    assert listed == served
    assert sockets == {path for path, item in paths.items() if "x-openresponses-websocket" in item}


def test_path_parameters_match_the_routes() -> None:
    for path, item in document()["paths"].items():
        names = set(re.findall(r"{(\w+)}", path))
        for method, op in item.items():
            if method in HTTP_METHODS:
                declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
                assert declared == names, (path, method)


def test_the_gateway_serves_it_without_a_key(stack) -> None:
    root = stack.base_url.removesuffix("/v1")
    reply = httpx.get(f"{root}/openapi.json", timeout=10)
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "application/json"
    assert reply.json() == document()


def stored_item_errors(item: dict) -> list[str]:
    """Why ``item`` is not a ``StoredItem`` of the document (JSON Schema 2020-12, as
    OpenAPI 3.1 has it), one message per error; empty when it is one."""
    uri = "urn:turnpike:gateway-openapi"
    registry = Registry().with_resource(uri, DRAFT202012.create_resource(document()))
    validator = Draft202012Validator(
        {"$ref": f"{uri}#/components/schemas/StoredItem"}, registry=registry
    )
    return [error.message for error in validator.iter_errors(item)]


def test_a_stored_item_is_one_of_the_item_shapes() -> None:
    """An id and a type are not an item: the schema must hold what clients read."""
    assert stored_item_errors({"id": "msg_1", "type": "message"})
    assert stored_item_errors({"id": "x_1", "type": "anything"})
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": "hi"}],
    }
    assert stored_item_errors(message) == []


def test_listed_items_validate_against_stored_item(stack) -> None:
    """Items as the gateway lists them (a conversation's, a response's input) and returns
    one (a conversation's item), every kind a request can store."""
    base, headers = stack.base_url, {"Authorization": f"Bearer {stack.api_key}"}
    items = [
        {"type": "message", "role": "user", "content": "What is in the file?"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Read it."}]},
        {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "turnpikes"},
    ]
    conversation = httpx.post(
        f"{base}/conversations", json={"items": items}, headers=headers, timeout=30
    ).json()
    listed = httpx.get(
        f"{base}/conversations/{conversation['id']}/items", headers=headers, timeout=30
    ).json()["data"]
    one = httpx.get(
        f"{base}/conversations/{conversation['id']}/items/{listed[0]['id']}",
        headers=headers,
        timeout=30,
    ).json()
    response = httpx.post(
        f"{base}/responses",
        json={"model": "turnpike-sim", "input": items},
        headers=headers,
        timeout=60,
    ).json()
    inputs = httpx.get(
        f"{base}/responses/{response['id']}/input_items", headers=headers, timeout=30
    ).json()["data"]
    assert len(listed) == len(inputs) == len(items)
    for item in [*listed, one, *inputs]:
        assert stored_item_errors(item) == [], item
