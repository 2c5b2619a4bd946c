"""The API tables of docs/api.md ("What the API serves") list every route the gateway
serves, with its methods, and every create-request field of the Open Responses spec and the
openai SDK: a route or field added without its row fails here."""

from __future__ import annotations

import json
import re
import typing

from openai.types.responses import response_create_params, responses_client_event_param
from support.paths import REPO_ROOT

from turnpike.gateway.api import conversations as conversations_api
from turnpike.gateway.api import dashboard as dashboard_api
from turnpike.gateway.api import http_endpoints as http_api
from turnpike.gateway.api import websocket_endpoint as ws_api

ROOT = REPO_ROOT
PLACEHOLDER = re.compile(r"\{[^}]*\}")


def section() -> str:
    """The page's opening section, which holds both tables (up to its first subsection)."""
    page = (ROOT / "docs" / "api.md").read_text()
    start = page.index("# What the API serves")
    return page[start : page.index("\n## ", start + 1)]


def table_rows(first_header: str) -> list[list[str]]:
    """The rows of the section's table whose first column is ``first_header``."""
    lines = section().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def ticked(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_every_route_is_in_the_endpoint_table_with_its_methods():
    listed: dict[str, set[str]] = {}
    for method, paths, status, _ in table_rows("method"):
        if status == "not served":
            continue
        methods = {"WEBSOCKET"} if method == "WebSocket" else set(ticked(method))
        for path in ticked(paths):
            listed.setdefault(PLACEHOLDER.sub("{}", path), set()).update(methods)
    for module in (http_api, conversations_api, ws_api, dashboard_api):
        for route in module.router.routes:
            path = PLACEHOLDER.sub("{}", route.path)
            methods = getattr(route, "methods", None) or {"WEBSOCKET"}
            assert path in listed, f"{route.path} is not in the endpoint table of docs/api.md"
            assert methods <= listed[path], f"{route.path}: {methods - listed[path]} not listed"


def test_every_create_field_is_in_the_field_table():
    spec = json.loads((ROOT / "specs" / "openresponses-openapi.json").read_text())
    fields = set(spec["components"]["schemas"]["CreateResponseBody"]["properties"])
    fields |= set(typing.get_type_hints(response_create_params.ResponseCreateParamsBase))
    ws_create = typing.get_type_hints(responses_client_event_param.ResponseCreate)
    fields |= set(ws_create) - {"type"}
    listed = {name.split(".")[0] for row in table_rows("field") for name in ticked(row[0])}
    assert fields - listed == set(), "create fields missing from the field table of docs/api.md"
    for row in table_rows("field"):
        assert row[1] in ("honoured", "echoed", "accepted", "refused"), row
