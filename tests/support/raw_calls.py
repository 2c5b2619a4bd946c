"""The gateway called without an SDK, as a careless or hostile client would: any JSON body
(or raw bytes) over HTTP, ``response.create`` frames over WebSocket. Every error body and
event read back is checked against the Open Responses spec (``support.openresponses``)."""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx
from support.openresponses import validate_error_body, validate_ws_event
from support.wire import TERMINAL
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect
from websockets.sync.connection import Connection

from turnpike.devstack import StackEndpoints


def post(
    stack: StackEndpoints,
    body: Any,
    key: str | Literal[False] | None = None,
    raw: bytes | str | None = None,
    path: str = "/responses",
) -> httpx.Response:
    """``body`` as JSON (or ``raw`` as it is) with ``key``, the stack's own key when None,
    no Authorization header at all when False."""
    headers = {"Content-Type": "application/json"}
    if key is not False:
        headers["Authorization"] = f"Bearer {key or stack.api_key}"
    content = raw if raw is not None else json.dumps(body)
    return httpx.post(f"{stack.base_url}{path}", content=content, headers=headers, timeout=30)


def expect_error(
    reply: httpx.Response, status: int, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    """The reply's ``error`` object, once its status, code and param are the ones given."""
    assert reply.status_code == status, reply.text
    body = reply.json()
    validate_error_body(body)
    if code is not None:
        assert body["error"]["code"] == code, body
    if param is not None:
        assert body["error"]["param"] == param, body
    return body["error"]


def ws(stack: StackEndpoints, key: str | None = None, **kw: Any) -> ClientConnection:
    return ws_connect(
        stack.ws_url,
        additional_headers={"Authorization": f"Bearer {key or stack.api_key}"},
        max_size=None,
        open_timeout=10,
        **kw,
    )


def until_terminal(sock: Connection, timeout: float = 30) -> list[dict[str, Any]]:
    """Every event up to a terminal one (an ``error`` event included)."""
    events = []
    while True:
        event = json.loads(sock.recv(timeout=timeout))
        validate_ws_event(event)
        events.append(event)
        if event["type"] in TERMINAL:
            return events


def send(sock: Connection, **body: Any) -> None:
    sock.send(json.dumps({"type": "response.create", **body}))
