"""The Open Responses compliance suite's behaviours, checked against the real stack (the
processes ``make run`` starts), over HTTP (JSON and SSE) and WebSocket, with every event
and object validated against ``specs/openresponses-openapi.json`` (``support.wire``), and,
as upstream does, every ``response.create`` frame sent checked against
``WebSocketResponseCreateEvent`` first.

Upstream: openresponses/openresponses, ``src/lib/compliance-tests.ts`` (the CLI's
``bin/compliance-test.ts`` runs it). Each upstream case and what mirrors it here:

- ``basic-response``, ``system-prompt``, ``multi-turn``, ``assistant-phase``,
  ``image-input``, ``tool-calling``: ``test_single_request_cases``, over all three
  transports (upstream sends them over HTTP only).
- ``streaming-response`` and ``websocket-response``: the same cases over SSE and over
  WebSocket; ``tool-calling-streaming``: ``test_tool_call_streams_its_argument_events``.
- ``file-input`` (an ``input_file`` with an inline PDF, written by hand without a
  cross-reference table): ``test_file_input_with_inline_pdf``, with that PDF
  (``support.pdf.COMPLIANCE_FIXTURE``) and with one that has the table.
- ``function-call-roundtrip``: ``test_function_call_roundtrip`` (HTTP and WebSocket).
- ``previous-response-id``: ``test_previous_response_id`` (HTTP, stored).
- ``compact-response``, ``compact-missing-model``: ``test_compact_*``.
- ``websocket-sequential-responses``, ``websocket-continuation``,
  ``websocket-reconnect-store-false-recovery``, ``websocket-previous-response-not-found``,
  ``websocket-failed-continuation-evicts-cache``, ``websocket-compact-new-chain``: the
  ``test_websocket_*`` tests of the same names.
- Not mirrored: ``response-output-phase-schema`` (a local fixture checked against the
  schema, no request is sent), and the optional ``file-search`` / ``offline-web-search``
  (hosted tools Turnpike does not run: accepted, echoed, never offered to the model).

Where Turnpike deliberately differs from the spec, the test says so and checks what
Turnpike does:

- Reasoning text streams as ``response.reasoning_text.delta``/``.done`` (OpenAI's and the
  SDK's names); the spec's catalogue calls the same events ``response.reasoning.*``.
  Validated under the spec's names (``test_reasoning_events_use_openai_names``).
- ``text.format`` of type ``json_schema`` is echoed with its ``schema``, as OpenAI does;
  the spec's ``JsonSchemaResponseFormat.schema`` only allows null
  (``test_json_schema_format_is_echoed_with_its_schema``).
- ``phase`` on an assistant input message is accepted and not kept.
"""

from __future__ import annotations

import base64
import io
import json

import httpx
import pytest
from support.openresponses import (
    validate_compacted_response,
    validate_error_body,
    validate_response_object,
)
from support.pdf import COMPLIANCE_FIXTURE, COMPLIANCE_FIXTURE_TEXT
from support.wire import REASONING_RENAMES, TRANSPORTS, create, post, socket

pytestmark = pytest.mark.stack

MODEL = "turnpike-sim"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "Get the current weather for a location",
    "parameters": {
        "type": "object",
        "properties": {
            "location": {
                "type": "string",
                "description": "The city and state, e.g. San Francisco, CA",
            }
        },
        "required": ["location"],
    },
}


def message(role: str, content, **extra) -> dict:
    return {"type": "message", "role": role, "content": content, **extra}


def png_data_url() -> str:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (32, 32), (200, 20, 40)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def pdf_bytes(text: str) -> bytes:
    """A one-page PDF showing ``text`` in Helvetica (objects, cross-reference table)."""
    stream = f"BT /F1 12 Tf 72 72 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 144] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for number, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, obj)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return out


# Upstream's single-request cases: id -> (input, extra body fields, output type wanted).
CASES = {
    "basic-response": ([message("user", "Say hello in exactly 3 words.")], {}, "message"),
    "streaming-response": ([message("user", "Count from 1 to 5.")], {}, "message"),
    "system-prompt": (
        [
            message("system", "You are a pirate. Always respond in pirate speak."),
            message("user", "Say hello."),
        ],
        {},
        "message",
    ),
    "assistant-phase": (
        [
            message("assistant", "I should answer with the saved number.", phase="commentary"),
            message("assistant", "The number is four.", phase="final_answer"),
            message("user", "Repeat only the number."),
        ],
        {},
        "message",
    ),
    "multi-turn": (
        [
            message("user", "My name is Alice."),
            message("assistant", "Hello Alice! Nice to meet you. How can I help you today?"),
            message("user", "What is my name?"),
        ],
        {},
        "message",
    ),
    "tool-calling": (
        [message("user", "What's the weather like in San Francisco?")],
        {"tools": [WEATHER]},
        "function_call",
    ),
}


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_single_request_cases(stack, case, transport):
    items, extra, wanted = CASES[case]
    turn = create(stack, transport, {"model": MODEL, "input": items, **extra})
    assert turn.ok and turn.response is not None, turn.error or turn.response
    assert wanted in [item["type"] for item in turn.response["output"]]
    if transport != "json":
        assert turn.types[0] == "response.created" and turn.types[-1] == "response.completed"


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_image_input(stack, transport):
    content = [
        {"type": "input_text", "text": "What do you see in this image? Answer in one sentence."},
        {"type": "input_image", "image_url": png_data_url()},
    ]
    turn = create(stack, transport, {"model": MODEL, "input": [message("user", content)]})
    assert turn.ok and turn.response is not None, turn.error
    assert turn.response["output"]


@pytest.mark.parametrize(
    "pdf",
    [COMPLIANCE_FIXTURE, pdf_bytes(COMPLIANCE_FIXTURE_TEXT)],
    ids=["upstream-fixture-without-xref", "with-xref"],
)
def test_file_input_with_inline_pdf(stack, pdf):
    data = base64.b64encode(pdf).decode()
    content = [
        {"type": "input_text", "text": "Read the attached file and answer with its title only."},
        {
            "type": "input_file",
            "filename": "fixture.pdf",
            "file_data": f"data:application/pdf;base64,{data}",
        },
    ]
    turn = create(stack, "json", {"model": MODEL, "input": [message("user", content)]})
    assert turn.ok and turn.response is not None, turn.error
    # What the model was given: the PDF's text, under its name.
    reply = httpx.get(
        f"{stack.base_url}/responses/{turn.response['id']}/input_items",
        headers={"Authorization": f"Bearer {stack.api_key}"},
        timeout=30,
    )
    [part] = [p for p in reply.json()["data"][0]["content"] if p["type"] == "input_file"]
    assert (part["filename"], part["text"]) == ("fixture.pdf", COMPLIANCE_FIXTURE_TEXT)


@pytest.mark.parametrize("transport", ["sse", "websocket"])
def test_tool_call_streams_its_argument_events(stack, transport):
    items, extra, _ = CASES["tool-calling"]
    turn = create(stack, transport, {"model": MODEL, "input": items, **extra})
    assert turn.ok, turn.error
    added = [e for e in turn.events if e["type"] == "response.output_item.added"]
    done = [e for e in turn.events if e["type"] == "response.output_item.done"]
    assert any(e["item"]["type"] == "function_call" for e in added)
    assert any(e["item"]["type"] == "function_call" for e in done)
    assert "response.function_call_arguments.delta" in turn.types
    assert "response.function_call_arguments.done" in turn.types
    [call] = [e["item"] for e in done if e["item"]["type"] == "function_call"]
    assert "location" in json.loads(call["arguments"])


def _roundtrip_bodies(first: dict | None) -> dict:
    if first is None:
        return {
            "model": MODEL,
            "input": "Use the weather tool to get the temperature in San Francisco.",
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "name": "get_weather"},
        }
    [call] = [item for item in first["output"] if item["type"] == "function_call"]
    return {
        "model": MODEL,
        "previous_response_id": first["id"],
        "input": [
            {
                "type": "function_call_output",
                "call_id": call["call_id"],
                "output": "64 degrees and clear",
            }
        ],
    }


@pytest.mark.parametrize("transport", ["json", "websocket"])
def test_function_call_roundtrip(stack, transport):
    if transport == "json":
        first = create(stack, "json", _roundtrip_bodies(None))
        second = create(stack, "json", _roundtrip_bodies(first.response))
    else:
        with socket(stack) as sock:
            first = sock.turn(_roundtrip_bodies(None))
            second = sock.turn(_roundtrip_bodies(first.response))
    assert first.ok and second.ok and second.response is not None, second.error
    assert second.response["output"] and second.response["output"][0]["type"] == "message"
    assert "64 degrees" in second.response["output"][0]["content"][0]["text"]


def test_previous_response_id(stack):
    first = create(
        stack,
        "json",
        {"model": MODEL, "input": "Remember this code word: papaya. Reply with only OK."},
    )
    assert first.response is not None, first.error
    second = create(
        stack,
        "json",
        {
            "model": MODEL,
            "previous_response_id": first.response["id"],
            "input": "What code word did I ask you to remember?",
        },
    )
    assert first.ok and second.ok and second.response is not None, second.error
    assert second.response["previous_response_id"] == first.response["id"]
    assert second.response["usage"]["input_tokens"] > first.response["usage"]["input_tokens"]


LAUNCH = [
    message("user", "We agreed to launch on Tuesday and notify support first."),
    message("assistant", "Understood. The launch is Tuesday, with support notified beforehand."),
]


def test_compact_response(stack):
    body = {"model": MODEL, "prompt_cache_key": "openresponses-compact-test", "input": LAUNCH}
    reply = post(stack, "/responses/compact", body)
    assert reply.status_code == 200, reply.text
    compacted = reply.json()
    validate_compacted_response(compacted)
    assert compacted["object"] == "response.compaction"
    # Exactly one compaction item, sealing the whole history, however short.
    assert [item["type"] for item in compacted["output"]] == ["compaction"]
    longer = [
        *LAUNCH,
        message("user", "Who writes the release notes?"),
        message("assistant", "Dana writes them."),
        message("user", "And who tells the customers?"),
    ]
    reply = post(stack, "/responses/compact", {**body, "input": longer})
    validate_compacted_response(reply.json())
    assert [item["type"] for item in reply.json()["output"]] == ["compaction"]


def test_compact_missing_model(stack):
    reply = post(stack, "/responses/compact", {"input": [message("user", "Compact this.")]})
    assert reply.status_code in (400, 422), reply.text
    validate_error_body(reply.json())
    assert reply.json()["error"]["param"] == "model"


# WebSocket cases ------------------------------------------------------------------------


def test_websocket_sequential_responses(stack):
    with socket(stack) as sock:
        turns = [
            sock.turn({"model": MODEL, "store": False, "input": f"Reply with exactly: {word}"})
            for word in ("first", "second")
        ]
    assert all(turn.ok for turn in turns)
    ids = [turn.response["id"] for turn in turns if turn.response is not None]
    assert len(set(ids)) == 2


def test_websocket_continuation(stack):
    with socket(stack) as sock:
        first = sock.turn(
            {
                "model": MODEL,
                "store": False,
                "input": "Remember the code word: cobalt. Reply with OK.",
            }
        )
        assert first.response is not None, first.error
        second = sock.turn(
            {
                "model": MODEL,
                "store": False,
                "previous_response_id": first.response["id"],
                "input": "What is the code word? Reply with only the code word.",
            }
        )
    assert first.ok and second.ok and second.response is not None, second.error
    assert second.response["previous_response_id"] == first.response["id"]


def test_websocket_reconnect_store_false_recovery(stack):
    with socket(stack) as sock:
        first = sock.turn(
            {
                "model": MODEL,
                "store": False,
                "input": "Remember the code word: copper. Reply with OK.",
            }
        )
    assert first.ok and first.response is not None
    with socket(stack) as sock:  # a new connection: its cache starts empty
        reconnect = sock.turn(
            {
                "model": MODEL,
                "store": False,
                "previous_response_id": first.response["id"],
                "input": "Try to continue after reconnect. Reply with exactly: reconnected",
            }
        )
        recovery = sock.turn(
            {
                "model": MODEL,
                "store": False,
                "input": [message("user", "Start a new response; reply with: recovered")],
            }
        )
    assert reconnect.error is not None, reconnect.response
    assert reconnect.error["error"]["code"] == "previous_response_not_found"
    assert reconnect.error["error"]["param"] == "previous_response_id"
    assert recovery.ok


def test_websocket_previous_response_not_found(stack):
    with socket(stack) as sock:
        turn = sock.turn(
            {
                "model": MODEL,
                "store": False,
                "previous_response_id": "resp_openresponses_missing_1",
                "input": "This should fail because the previous response is missing.",
            }
        )
    assert turn.error is not None, turn.response
    assert turn.error["status"] == 400
    assert turn.error["error"]["code"] == "previous_response_not_found"


def test_websocket_failed_continuation_evicts_cache(stack):
    with socket(stack) as sock:
        first = sock.turn(
            {"model": MODEL, "store": False, "input": "Remember the code word: ember. Reply OK."}
        )
        assert first.response is not None, first.error
        parent = first.response["id"]
        failed = sock.turn(
            {
                "model": MODEL,
                "store": False,
                "previous_response_id": parent,
                "input": [
                    {
                        "type": "function_call_output",
                        "call_id": "call_openresponses_missing",
                        "output": "No matching tool call exists in the previous response.",
                    }
                ],
            }
        )
        retry = sock.turn(
            {
                "model": MODEL,
                "store": False,
                "previous_response_id": parent,
                "input": "Try to continue after the failed turn. Reply with exactly: stale",
            }
        )
    assert first.ok
    assert failed.error is not None, failed.response
    assert retry.error is not None, retry.response
    assert retry.error["error"]["code"] == "previous_response_not_found"


def test_websocket_compact_new_chain(stack):
    history = [
        message("user", [{"type": "input_text", "text": "Remember the code word: slate."}]),
        message("assistant", [{"type": "output_text", "text": "OK."}]),
        message("user", [{"type": "input_text", "text": "Compress this for later."}]),
    ]
    reply = post(stack, "/responses/compact", {"model": MODEL, "input": history})
    assert reply.status_code == 200, reply.text
    validate_compacted_response(reply.json())
    output = reply.json()["output"]
    with socket(stack) as sock:
        turn = sock.turn(
            {
                "model": MODEL,
                "store": False,
                "input": [*output, message("user", "Continue from here. Reply: compacted")],
                "tools": [],
            },
            validate=False,  # the compacted items go back as the server made them
        )
    assert turn.ok and turn.response is not None, turn.error
    assert turn.response["previous_response_id"] is None


# Deliberate deviations --------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["sse", "websocket"])
def test_reasoning_events_use_openai_names(stack, transport):
    turn = create(
        stack,
        transport,
        {"model": MODEL, "input": "Why is the sky blue?", "reasoning": {"effort": "low"}},
        renames=REASONING_RENAMES,
    )
    assert turn.ok and turn.response is not None, turn.error
    assert "response.reasoning_text.delta" in turn.types
    assert "response.reasoning_text.done" in turn.types
    assert not {"response.reasoning.delta", "response.reasoning.done"} & set(turn.types)
    assert [item["type"] for item in turn.response["output"]] == ["reasoning", "message"]


SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_json_schema_format_differs_from_the_spec_only_in_its_echoed_schema(stack, transport):
    fmt = {"type": "json_schema", "name": "place", "schema": SCHEMA, "strict": True}
    body = {"model": MODEL, "input": "Name a city.", "text": {"format": fmt}}
    with pytest.raises(AssertionError, match=r"text\.format\.schema"):
        create(stack, transport, body)  # the spec allows only null there


def test_json_schema_format_is_echoed_with_its_schema(stack):
    fmt = {"type": "json_schema", "name": "place", "schema": SCHEMA, "strict": True}
    reply = post(
        stack, "/responses", {"model": MODEL, "input": "Name a city.", "text": {"format": fmt}}
    )
    assert reply.status_code == 200, reply.text
    response = reply.json()
    echoed = response["text"]["format"]
    assert echoed == {**fmt, "description": None}
    # Everything else is as the spec says.
    validate_response_object({**response, "text": {"format": {**echoed, "schema": None}}})
