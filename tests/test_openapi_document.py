"""The gateway's OpenAPI document (services/gateway/openapi.json): current with its
sources, valid OpenAPI, listing exactly the routes the app has, and served."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import schemathesis
from fastapi.routing import APIRoute, APIWebSocketRoute
from gateway.app import create_app
from gateway.openapi_api import DOCUMENT_PATH
from support.procs import REPO_ROOT
from support.scripts import load_script

gen_openapi = load_script("gen_openapi", REPO_ROOT / "scripts" / "gen_openapi.py")
HTTP_METHODS = {"get", "post", "put", "patch", "delete", "head", "options"}


def document() -> dict:
    return json.loads(DOCUMENT_PATH.read_text())


def test_the_committed_document_is_current() -> None:
    assert DOCUMENT_PATH.read_text() == gen_openapi.render(), (
        "services/gateway/openapi.json is stale: run `make openapi`"
    )


def test_the_document_is_valid_openapi() -> None:
    schema = schemathesis.openapi.from_dict(document())
    # Loading resolves every reference; each operation must come out whole.
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == sum(
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
        for method in route.methods - {"HEAD"}
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
