"""One create request over each of the gateway's transports (JSON, SSE, WebSocket), with
every event and object checked against the Open Responses spec on the way in
(``support.openresponses``): what a compliance suite does, with Python's clients.

``renames`` maps event types Turnpike sends under OpenAI's names to the spec's names
for the same events, so a documented deviation in naming is validated by its schema
instead of failing as an unknown type.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

import httpx
from support.openresponses import (
    parse_sse,
    validate_error_body,
    validate_response_object,
    validate_stream_event,
    validate_ws_create_event,
    validate_ws_event,
)
from websockets.sync.client import connect as ws_connect
from websockets.sync.connection import Connection

TRANSPORTS = ("json", "sse", "websocket")
# The events that end a turn over WebSocket (Final: mypy narrows an event by them).
TERMINAL: Final = ("response.completed", "response.failed", "response.incomplete", "error")
# OpenAI's (and the SDK's) names for the reasoning text events -> the spec's.
REASONING_RENAMES = {
    "response.reasoning_text.delta": "response.reasoning.delta",
    "response.reasoning_text.done": "response.reasoning.done",
}
NO_RENAMES: Mapping[str, str] = MappingProxyType({})


@dataclass
class Turn:
    """What one create request got: its events (none over JSON), the final response
    object, or the error (HTTP body's ``error``, or the WebSocket error event)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    response: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    status: int = 200

    @property
    def types(self) -> list[str]:
        return [event["type"] for event in self.events]

    @property
    def ok(self) -> bool:
        return self.response is not None and self.response["status"] == "completed"


def _renamed(event: dict[str, Any], renames: Mapping[str, str]) -> dict[str, Any]:
    kind = event.get("type", "")
    return {**event, "type": renames[kind]} if kind in renames else event


def _check_sequence(events: list[dict[str, Any]]) -> None:
    numbers = [event["sequence_number"] for event in events]
    assert numbers == list(range(len(numbers))), f"sequence numbers {numbers}"
    assert len({e["response"]["id"] for e in events if "response" in e}) <= 1


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


def post(stack, path: str, body: Any, key: str | None = None) -> httpx.Response:
    return httpx.post(
        f"{stack.base_url}{path}", json=body, headers=_auth(key or stack.api_key), timeout=60
    )


def create_json(stack, body: dict[str, Any], key: str | None = None) -> Turn:
    reply = post(stack, "/responses", {**body, "stream": False}, key)
    if reply.status_code != 200:
        validate_error_body(reply.json())
        return Turn(error=reply.json()["error"], status=reply.status_code)
    validate_response_object(reply.json())
    return Turn(response=reply.json())


def create_sse(
    stack, body: dict[str, Any], key: str | None = None, renames: Mapping[str, str] = NO_RENAMES
) -> Turn:
    reply = post(stack, "/responses", {**body, "stream": True}, key)
    if reply.status_code != 200:
        validate_error_body(reply.json())
        return Turn(error=reply.json()["error"], status=reply.status_code)
    assert reply.headers["content-type"].startswith("text/event-stream")
    frames = parse_sse(reply.text)
    assert frames and frames[-1][1] == "[DONE]", "the stream ends with data: [DONE]"
    events = []
    for name, data in frames[:-1]:
        event = json.loads(data)
        assert name in (None, event["type"]), f"event: {name} carries {event['type']}"
        validate_stream_event(_renamed(event, renames))
        events.append(event)
    _check_sequence(events)
    assert events[-1]["type"] in TERMINAL
    final = events[-1].get("response")
    if final is not None:
        validate_response_object(final)
    return Turn(events=events, response=final)


class Socket:
    """One WebSocket connection, as a raw client (the compliance suite's) drives it."""

    def __init__(self, conn: Connection, renames: Mapping[str, str]) -> None:
        self.conn = conn
        self.renames = renames

    def send(self, body: dict[str, Any], validate: bool = True) -> None:
        """Send ``body`` as a ``response.create``, first checked against the spec (as
        the compliance suite does, except for items the server made, like compaction
        output, which a client sends back as they are)."""
        frame = {"type": "response.create", **body}
        if validate:
            validate_ws_create_event(frame)
        self.conn.send(json.dumps(frame))

    def read_turn(self, timeout: float = 60) -> Turn:
        """Events up to the next terminal one (an ``error`` event included)."""
        events: list[dict[str, Any]] = []
        while True:
            event = json.loads(self.conn.recv(timeout=timeout))
            validate_ws_event(_renamed(event, self.renames))
            events.append(event)
            if event["type"] == "error":
                return Turn(events=events, error=event, status=event["status"])
            if event["type"] in TERMINAL:
                _check_sequence(events)
                validate_response_object(event["response"])
                return Turn(events=events, response=event["response"])

    def turn(self, body: dict[str, Any], validate: bool = True) -> Turn:
        self.send(body, validate)
        return self.read_turn()


@contextmanager
def socket(
    stack, key: str | None = None, renames: Mapping[str, str] = NO_RENAMES
) -> Iterator[Socket]:
    with ws_connect(
        stack.ws_url,
        additional_headers=_auth(key or stack.api_key),
        max_size=None,
        open_timeout=10,
    ) as conn:
        yield Socket(conn, renames)


def create(
    stack,
    transport: str,
    body: dict[str, Any],
    key: str | None = None,
    renames: Mapping[str, str] = NO_RENAMES,
) -> Turn:
    """``body`` as one create request over ``transport`` (one of ``TRANSPORTS``)."""
    if transport == "json":
        return create_json(stack, body, key)
    if transport == "sse":
        return create_sse(stack, body, key, renames)
    assert transport == "websocket", transport
    with socket(stack, key, renames) as sock:
        return sock.turn(body)
