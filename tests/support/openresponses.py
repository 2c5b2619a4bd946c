"""Validate what the gateway sends against the Open Responses specification.

The spec is vendored at ``specs/openresponses-openapi.json`` (OpenAPI 3.1, schemas in
JSON Schema 2020-12). The whole document is registered as one ``referencing`` resource,
so every ``#/components/schemas/...`` reference resolves inside it.

What is checked, and against which schema:

* ``validate_response_object``: ``ResponseResource`` (the JSON body of ``POST /responses``
  and the ``response`` inside lifecycle events).
* ``validate_stream_event``: one of the 24 schemas in the ``text/event-stream`` ``oneOf``
  of ``POST /responses`` (200), picked by the event's ``type`` (each has a one-value
  ``type`` enum; the ``discriminator`` keyword is OpenAPI-only and ignored by JSON
  Schema, so picking the branch ourselves keeps errors readable). Unknown type: error.
* ``validate_ws_event``: the same, after checking and removing the WebSocket-only
  ``stream_id``; an ``error`` event is checked against ``WebSocketErrorEvent`` instead.
* ``validate_input_item`` / ``validate_output_item``: ``ItemField`` (message,
  function_call, function_call_output, reasoning, compaction), branch picked by ``type``.
  The spec has no schema for the ``GET /responses/{id}/input_items`` page itself;
  ``validate_input_items_page`` checks the list envelope the openai SDK pages with
  (``object: "list"``, ``data``, ``first_id``, ``last_id``, ``has_more``) and each item.
* ``validate_compacted_response``: ``CompactResource`` (``POST /responses/compact``).
* ``validate_error_body``: not in the spec; the OpenAI HTTP error envelope
  ``{"error": {"message", "type", "code", "param"}}`` with all four keys present.
* ``validate_sse_body``: a raw ``text/event-stream`` body, event by event.

Quirks of this spec (version 2026-04-24) worth knowing:

* No schema says ``additionalProperties: false``: unknown extra fields always pass, so
  these checks catch missing or mistyped fields, never extra ones.
* Nullable fields are ``anyOf [T, null]`` and still **required** (ResponseResource
  requires all 31 properties; ``completed_at``, ``usage``, ``reasoning``, ``error`` ...
  must be present, possibly null). ``top_p``, ``temperature``, ``presence_penalty``,
  ``frequency_penalty`` (numbers), ``top_logprobs`` (integer), ``service_tier``,
  ``store``, ``background`` must not be null. ``metadata`` has no schema at all.
* ``created_at`` / ``completed_at`` are **integers**: a float timestamp fails.
* ``ResponseResource.error`` (``Error``) needs string ``code`` and ``message``.
* ``tools`` items are ``FunctionTool`` only, each with ``description``, ``parameters``
  and ``strict`` present (nullable). A ``reasoning`` object needs ``effort`` and ``summary``.
* Output items: messages need ``id`` and ``status``; ``output_text`` parts need
  ``annotations``; ``function_call`` and ``function_call_output`` items need ``id`` and
  ``status`` (so do input items returned by ``input_items``).
* ``logprobs`` is optional on ``response.output_text.delta`` / ``.done``.
* The streamed ``error`` event is **nested**: ``{"type": "error", "sequence_number": n,
  "error": {"type", "code", "message", "param"}}`` (``code``/``param`` nullable but
  present). The flat OpenAI shape (``code``/``message``/``param`` at top level) fails.
  Note the openai SDK raises ``APIError`` for any SSE payload with a truthy top-level
  ``error`` key, so a spec-shaped error event is raised by the SDK, not yielded.
* ``WebSocketErrorEvent`` needs an integer ``status`` and ``error.code`` **and**
  ``error.message`` as strings (``code: null`` fails, stricter than the SDK);
  ``sequence_number`` is not part of it (allowed as an extra field).
* The event catalogue is narrower than OpenAI's: reasoning text is
  ``response.reasoning.delta`` / ``.done`` (not ``response.reasoning_text.*``), and
  there are no ``response.steer.*``, hosted-tool, audio, custom-tool or compaction
  events; those are reported as unknown types.
* SSE framing, including the terminal ``data: [DONE]``, is not described by the JSON
  document; ``[DONE]`` is not an event, and ``validate_sse_body`` accepts it only as
  the last data line (``require_done=True`` makes it mandatory).

Every failure raises ``AssertionError`` naming what was validated, then the JSON path
and message of the first few errors.
"""

from __future__ import annotations

import functools
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, relevance
from referencing import Registry
from referencing.jsonschema import DRAFT202012
from support.paths import REPO_ROOT

SPEC_PATH = REPO_ROOT / "specs" / "openresponses-openapi.json"
_SPEC_URI = "urn:turnpike:openresponses-openapi"
_STREAM_ID = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
_MAX_ERRORS = 3

_ERROR_BODY_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "code", "param"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "code": {"type": ["string", "null"]},
                "param": {"type": ["string", "null"]},
            },
        }
    },
}

_LIST_PAGE_SCHEMA = {
    "type": "object",
    "required": ["object", "data", "first_id", "last_id", "has_more"],
    "properties": {
        "object": {"const": "list"},
        "data": {"type": "array"},
        "first_id": {"type": ["string", "null"]},
        "last_id": {"type": ["string", "null"]},
        "has_more": {"type": "boolean"},
    },
}


@functools.cache
def spec() -> dict[str, Any]:
    return json.loads(SPEC_PATH.read_text())


@functools.cache
def _registry() -> Registry:
    return Registry().with_resource(_SPEC_URI, DRAFT202012.create_resource(spec()))


@functools.cache
def _validator(schema_name: str) -> Draft202012Validator:
    if schema_name not in spec()["components"]["schemas"]:
        raise KeyError(f"no schema {schema_name!r} in {SPEC_PATH.name}")
    ref = {"$ref": f"{_SPEC_URI}#/components/schemas/{schema_name}"}
    return Draft202012Validator(ref, registry=_registry())


def _types_by_name(branches: Iterable[dict[str, Any]]) -> dict[str, str]:
    """``type`` value -> schema name, for a ``oneOf`` of ``$ref``s whose schemas each
    pin ``type`` to one value."""
    schemas = spec()["components"]["schemas"]
    table: dict[str, str] = {}
    for branch in branches:
        name = branch["$ref"].rsplit("/", 1)[1]
        type_schema = schemas[name]["properties"]["type"]
        for value in type_schema.get("enum", [type_schema.get("const")]):
            assert value not in table, f"type {value!r} is claimed by two schemas"
            table[value] = name
    return table


@functools.cache
def stream_event_schemas() -> dict[str, str]:
    """Event ``type`` -> schema name, from ``POST /responses`` 200 ``text/event-stream``."""
    content = spec()["paths"]["/responses"]["post"]["responses"]["200"]["content"]
    return _types_by_name(content["text/event-stream"]["schema"]["oneOf"])


@functools.cache
def item_schemas() -> dict[str, str]:
    """Item ``type`` -> schema name, from ``ItemField``."""
    return _types_by_name(spec()["components"]["schemas"]["ItemField"]["oneOf"])


# -- error reporting -------------------------------------------------------------------


def _branch_penalty(errors: list[ValidationError]) -> int:
    """How clearly a ``oneOf``/``anyOf`` branch is the wrong one: its ``type``
    discriminator differs, or the instance is not even of its JSON type."""
    penalty = 0
    for error in errors:
        if list(error.relative_path) == ["type"] and error.validator in ("enum", "const"):
            penalty += 2
        elif not error.relative_path and error.validator == "type":
            penalty += 2
    return penalty


def _explain(error: ValidationError) -> ValidationError:
    """Descend from "not valid under any of the given schemas" into the branch meant
    for this instance, to the error that says what is actually wrong."""
    while error.context:
        branches: dict[Any, list[ValidationError]] = defaultdict(list)
        for sub in error.context:
            branches[sub.relative_schema_path[0]].append(sub)
        chosen = min(branches.values(), key=_branch_penalty)
        error = min(chosen, key=relevance)
    return error


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _check(validator: Draft202012Validator, instance: Any, what: str) -> None:
    errors = sorted(validator.iter_errors(instance), key=relevance)
    if not errors:
        return
    lines = [f"{what} does not match the Open Responses spec:"]
    for error in errors[:_MAX_ERRORS]:
        leaf = _explain(error)
        lines.append(f"  {leaf.json_path}: {_short(leaf.message)}")
    if len(errors) > _MAX_ERRORS:
        lines.append(f"  ... and {len(errors) - _MAX_ERRORS} more")
    raise AssertionError("\n".join(lines))


def _by_type(instance: Any, table: dict[str, str], what: str) -> str:
    if not isinstance(instance, dict):
        raise AssertionError(f"{what} must be a JSON object, got {type(instance).__name__}")
    kind = instance.get("type")
    if kind not in table:
        known = ", ".join(sorted(table))
        raise AssertionError(f"{what} has unknown type {kind!r}; the spec knows: {known}")
    return table[kind]


# -- public checks ---------------------------------------------------------------------


def validate_response_object(obj: Any) -> None:
    _check(_validator("ResponseResource"), obj, "response object")


def validate_stream_event(event: Any) -> None:
    name = _by_type(event, stream_event_schemas(), "stream event")
    _check(_validator(name), event, f"{event['type']} event ({name})")


def validate_ws_event(event: Any) -> None:
    """A server event on the WebSocket: a stream event (or ``WebSocketErrorEvent``)
    plus an optional ``stream_id`` lane."""
    if not isinstance(event, dict):
        raise AssertionError(f"WebSocket event must be a JSON object, got {event!r}")
    if "stream_id" in event:
        stream_id = event["stream_id"]
        if not isinstance(stream_id, str) or not _STREAM_ID.match(stream_id):
            raise AssertionError(
                f"WebSocket event stream_id {stream_id!r} is not 1-256 of [A-Za-z0-9_.-]"
            )
        event = {key: value for key, value in event.items() if key != "stream_id"}
    if event.get("type") == "error":
        _check(_validator("WebSocketErrorEvent"), event, "WebSocket error event")
    else:
        validate_stream_event(event)


def validate_ws_create_event(frame: Any) -> None:
    """A client's ``response.create`` frame (``WebSocketResponseCreateEvent``): what a
    test sends is itself what the spec allows (no ``stream``, ``background``...)."""
    _check(_validator("WebSocketResponseCreateEvent"), frame, "response.create frame")


def validate_output_item(item: Any) -> None:
    name = _by_type(item, item_schemas(), "item")
    _check(_validator(name), item, f"{item['type']} item ({name})")


def validate_input_item(item: Any) -> None:
    """An item of ``GET /responses/{id}/input_items``: the spec's ``ItemField``, the
    same schema as output items (so ids and statuses are required here too)."""
    validate_output_item(item)


def validate_input_items_page(body: Any) -> None:
    _check(Draft202012Validator(_LIST_PAGE_SCHEMA), body, "input_items page")
    for item in body["data"]:
        validate_input_item(item)


def validate_compacted_response(obj: Any) -> None:
    _check(_validator("CompactResource"), obj, "compacted response")


def validate_error_body(body: Any) -> None:
    _check(Draft202012Validator(_ERROR_BODY_SCHEMA), body, "HTTP error body")


def parse_sse(raw: str) -> list[tuple[str | None, str]]:
    """``(event name, data)`` per event of a ``text/event-stream`` body (WHATWG rules:
    blank line ends an event, ``:`` comments skipped, ``data:`` lines joined)."""
    events: list[tuple[str | None, str]] = []
    name: str | None = None
    data: list[str] = []
    for line in [*raw.replace("\r\n", "\n").replace("\r", "\n").split("\n"), ""]:
        if not line:
            if data:
                events.append((name, "\n".join(data)))
            name, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
    return events


def validate_sse_body(raw: str, require_done: bool = False) -> list[dict[str, Any]]:
    """Check every event of an SSE body (and that an ``event:`` name, when sent, equals
    the payload's ``type``); returns the decoded events. ``[DONE]`` may only end it."""
    frames = parse_sse(raw)
    done = bool(frames) and frames[-1][1] == "[DONE]"
    if done:
        frames = frames[:-1]
    elif require_done:
        raise AssertionError("SSE body does not end with data: [DONE]")
    events = []
    for index, (name, data) in enumerate(frames):
        if data == "[DONE]":
            raise AssertionError(f"SSE event {index} is [DONE] but more events follow")
        try:
            event = json.loads(data)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"SSE event {index} data is not JSON: {_short(data)}") from exc
        validate_stream_event(event)
        if name is not None and name != event["type"]:
            raise AssertionError(f"SSE event {index}: event: {name!r} but type {event['type']!r}")
        events.append(event)
    return events
