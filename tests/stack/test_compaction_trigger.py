"""A ``compaction_trigger`` item, the final input item of an ordinary create (as the
Codex CLI compacts: it has no fallback), answers exactly one ``compaction`` item and
nothing else, over HTTP (JSON and SSE) and WebSocket; that item, sent back before the
newer items, continues the conversation as the whole history would."""

from __future__ import annotations

import httpx
import pytest
from support.wire import TRANSPORTS, Turn, create_json, create_sse, socket

pytestmark = pytest.mark.stack

MODEL = "turnpike-sim-4000"
INSTRUCTIONS = "Answer briefly."
TRIGGER = {"type": "compaction_trigger"}
ONLY_COMPACTION = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.output_item.done",
    "response.completed",
]


def message(role: str, text: str) -> dict:
    return {"type": "message", "role": role, "content": text}


HISTORY = [
    message("user", "My name is Alice."),
    message("assistant", "Hello Alice!"),
    message("user", "Tell me about the number seven."),
    message("assistant", "Seven is prime."),
]


def turn(stack, transport: str, body: dict) -> Turn:
    """``body`` over ``transport``; the WebSocket frame is not checked against the spec,
    whose input items lack ``compaction_trigger`` (OpenAI's and the SDK's have it)."""
    if transport == "json":
        return create_json(stack, body)
    if transport == "sse":
        return create_sse(stack, body)
    with socket(stack) as sock:
        return sock.turn(body, validate=False)


def body(items: list[dict], **extra) -> dict:
    return {"model": MODEL, "instructions": INSTRUCTIONS, "input": items, **extra}


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_trigger_answers_exactly_one_compaction_item(stack, transport):
    done = turn(stack, transport, body([*HISTORY, TRIGGER], store=False))
    assert done.ok, done.error
    assert done.response is not None
    output = done.response["output"]
    assert [item["type"] for item in output] == ["compaction"]
    assert output[0]["id"] and output[0]["encrypted_content"]
    # What was compacted counts as input; nothing is generated.
    whole = create_json(stack, body(HISTORY, max_output_tokens=16))
    assert whole.response is not None
    assert done.response["usage"]["input_tokens"] == whole.response["usage"]["input_tokens"]
    assert done.response["usage"]["output_tokens"] == 0
    if transport != "json":
        assert done.types == ONLY_COMPACTION
        assert done.events[2]["item"] == done.events[3]["item"] == output[0]


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_compaction_item_continues_the_conversation(stack, transport):
    compacted = turn(stack, transport, body([*HISTORY, TRIGGER], store=False))
    assert compacted.response is not None
    item = compacted.response["output"][0]
    follow_up = message("user", "What is my name?")
    whole = create_json(stack, body([*HISTORY, follow_up]))
    assert whole.response is not None
    expected = whole.response["usage"]["input_tokens"]
    users = [m for m in HISTORY if m["role"] == "user"]
    # The compaction item then the newer items, with or without what it replaced before
    # it (Codex keeps the user messages): the model sees the whole history.
    for items in ([item, follow_up], [*users, item, follow_up]):
        again = turn(stack, transport, body(items))
        assert again.ok, again.error
        assert again.response is not None
        assert again.response["usage"]["input_tokens"] == expected
        assert [i["type"] for i in again.response["output"]] == ["message"]


def test_a_stored_trigger_response_chains(stack):
    first = create_json(stack, body(HISTORY, max_output_tokens=16))
    assert first.response is not None
    compacted = create_json(
        stack, {"model": MODEL, "previous_response_id": first.response["id"], "input": [TRIGGER]}
    )
    assert compacted.ok and compacted.response is not None
    assert [i["type"] for i in compacted.response["output"]] == ["compaction"]
    follow_up = message("user", "Go on.")
    chained = create_json(
        stack,
        body([follow_up], previous_response_id=compacted.response["id"], max_output_tokens=16),
    )
    direct = create_json(
        stack,
        body([follow_up], previous_response_id=first.response["id"], max_output_tokens=16),
    )
    assert direct.response is not None and chained.response is not None, chained.error
    assert chained.response["usage"]["input_tokens"] == direct.response["usage"]["input_tokens"]


def test_a_trigger_must_be_the_final_input_item(stack):
    refused = create_json(stack, body([TRIGGER, *HISTORY]))
    assert refused.status == 400 and refused.error is not None
    assert refused.error["param"] == "input[0].type"
    assert refused.error["code"] == "invalid_value"
    assert "final input item" in refused.error["message"]


def test_a_trigger_is_not_a_conversation_item(stack):
    created = httpx.post(
        f"{stack.base_url}/conversations",
        json={"items": [message("user", "Hi"), TRIGGER]},
        headers={"authorization": f"Bearer {stack.api_key}"},
        timeout=60,
    )
    assert created.status_code == 400, created.text
    error = created.json()["error"]
    assert error["param"] == "items[1].type" and error["code"] == "unsupported_item_type"


def test_a_trigger_continuing_on_the_socket_seals_the_whole_chain(stack):
    """Codex sends only the trigger after ``previous_response_id`` when its input extends
    the previous turn's (store false: the connection's cache holds the chain)."""
    follow_up = message("user", "What is my name?")
    with socket(stack) as sock:
        first = sock.turn(body(HISTORY, store=False, max_output_tokens=16))
        assert first.response is not None
        compacted = sock.turn(
            body([TRIGGER], store=False, previous_response_id=first.response["id"]),
            validate=False,
        )
        assert compacted.ok, compacted.error
        assert compacted.response is not None
        [item] = compacted.response["output"]
        assert item["type"] == "compaction"
        direct = sock.turn(
            body([follow_up], store=False, previous_response_id=first.response["id"])
        )
        again = sock.turn(body([item, follow_up], store=False), validate=False)
    assert direct.response is not None and again.response is not None, again.error
    assert again.response["usage"]["input_tokens"] == direct.response["usage"]["input_tokens"]
