"""The Open Responses schema checks in tests/support/openresponses.py."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from support.openresponses import (
    item_schemas,
    stream_event_schemas,
    validate_error_body,
    validate_input_item,
    validate_input_items_page,
    validate_response_object,
    validate_sse_body,
    validate_stream_event,
    validate_ws_event,
)

MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "status": "completed",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "Hello.", "annotations": [], "logprobs": []}],
}

# Every one of the 31 properties ResponseResource requires.
RESPONSE: dict[str, Any] = {
    "id": "resp_1",
    "object": "response",
    "created_at": 1730000000,
    "completed_at": 1730000001,
    "status": "completed",
    "incomplete_details": None,
    "model": "turnpike-sim",
    "previous_response_id": None,
    "instructions": None,
    "output": [
        MESSAGE,
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Paris"}',
            "status": "completed",
        },
    ],
    "error": None,
    "tools": [
        {
            "type": "function",
            "name": "get_weather",
            "description": None,
            "parameters": {"type": "object", "properties": {}},
            "strict": None,
        }
    ],
    "tool_choice": "auto",
    "truncation": "disabled",
    "parallel_tool_calls": True,
    "text": {"format": {"type": "text"}},
    "top_p": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "top_logprobs": 0,
    "temperature": 1.0,
    "reasoning": None,
    "usage": {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 19,
    },
    "max_output_tokens": None,
    "max_tool_calls": None,
    "store": True,
    "background": False,
    "service_tier": "default",
    "metadata": {},
    "safety_identifier": None,
    "prompt_cache_key": None,
}

DELTA = {
    "type": "response.output_text.delta",
    "sequence_number": 4,
    "item_id": "msg_1",
    "output_index": 0,
    "content_index": 0,
    "delta": "Hel",
    "logprobs": [],
}

WS_ERROR = {
    "type": "error",
    "status": 400,
    "error": {
        "type": "invalid_request_error",
        "code": "previous_response_not_found",
        "message": "Previous response with id 'resp_x' not found.",
        "param": "previous_response_id",
    },
}


def changed(base: dict[str, Any], **fields: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    out.update(fields)
    return out


def without(base: dict[str, Any], key: str) -> dict[str, Any]:
    out = copy.deepcopy(base)
    del out[key]
    return out


def test_the_spec_has_the_expected_catalogue() -> None:
    assert len(RESPONSE) == 31
    events = stream_event_schemas()
    assert len(events) == 24
    assert events["response.output_text.delta"] == "ResponseOutputTextDeltaStreamingEvent"
    assert events["error"] == "ErrorStreamingEvent"
    assert set(item_schemas()) == {
        "message",
        "function_call",
        "function_call_output",
        "reasoning",
        "compaction",
    }


def test_a_complete_response_object_passes() -> None:
    validate_response_object(RESPONSE)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (without(RESPONSE, "usage"), "'usage' is a required property"),
        (without(RESPONSE, "completed_at"), "'completed_at' is a required property"),
        (changed(RESPONSE, created_at=1730000000.5), "$.created_at: 1730000000.5 is not of"),
        (changed(RESPONSE, temperature=None), "$.temperature: None is not of type 'number'"),
        (changed(RESPONSE, truncation="off"), "$.truncation: 'off' is not one of"),
        (changed(RESPONSE, reasoning={"effort": None}), "'summary' is a required property"),
    ],
)
def test_a_broken_response_object_fails_with_its_path(obj: dict, expected: str) -> None:
    with pytest.raises(AssertionError) as caught:
        validate_response_object(obj)
    assert expected in str(caught.value)


def test_errors_inside_an_output_item_point_at_the_field() -> None:
    broken = copy.deepcopy(RESPONSE)
    del broken["output"][0]["content"][0]["annotations"]
    with pytest.raises(AssertionError) as caught:
        validate_response_object(broken)
    assert "$.output[0].content[0]: 'annotations' is a required property" in str(caught.value)

    broken = copy.deepcopy(RESPONSE)
    broken["output"][1]["status"] = "failed"
    with pytest.raises(AssertionError) as caught:
        validate_response_object(broken)
    assert "$.output[1].status: 'failed' is not one of" in str(caught.value)


def test_output_text_delta_passes_with_or_without_logprobs() -> None:
    validate_stream_event(DELTA)
    validate_stream_event(without(DELTA, "logprobs"))  # optional in the spec


def test_a_broken_stream_event_fails() -> None:
    with pytest.raises(AssertionError, match=r"\$: 'delta' is a required property"):
        validate_stream_event(without(DELTA, "delta"))
    with pytest.raises(AssertionError, match=r"\$.sequence_number: '4' is not of type"):
        validate_stream_event(changed(DELTA, sequence_number="4"))


def test_lifecycle_events_check_the_embedded_response() -> None:
    created = {"type": "response.created", "sequence_number": 0, "response": RESPONSE}
    validate_stream_event(created)
    broken = changed(created, response=without(RESPONSE, "tools"))
    with pytest.raises(AssertionError, match=r"\$.response: 'tools' is a required property"):
        validate_stream_event(broken)


def test_the_spec_error_event_is_nested_and_the_flat_one_fails() -> None:
    nested = {
        "type": "error",
        "sequence_number": 3,
        "error": {"type": "server_error", "code": None, "message": "boom", "param": None},
    }
    validate_stream_event(nested)
    flat = {"type": "error", "sequence_number": 3, "code": None, "message": "boom", "param": None}
    with pytest.raises(AssertionError, match="'error' is a required property"):
        validate_stream_event(flat)


@pytest.mark.parametrize("kind", ["response.reasoning_text.delta", "response.done", None])
def test_an_unknown_event_type_fails(kind: str | None) -> None:
    with pytest.raises(AssertionError, match="unknown type"):
        validate_stream_event(changed(DELTA, type=kind))
    with pytest.raises(AssertionError, match="unknown type"):
        validate_ws_event(changed(DELTA, type=kind))


def test_ws_error_event_needs_an_integer_status() -> None:
    validate_ws_event(WS_ERROR)
    validate_ws_event(changed(WS_ERROR, stream_id="lane-1.a_b", sequence_number=None))
    with pytest.raises(AssertionError, match=r"\$.status: '400' is not of type 'integer'"):
        validate_ws_event(changed(WS_ERROR, status="400"))
    with pytest.raises(AssertionError, match="'status' is a required property"):
        validate_ws_event(without(WS_ERROR, "status"))


def test_ws_events_may_carry_a_well_formed_stream_id() -> None:
    validate_ws_event(changed(DELTA, stream_id="main"))
    validate_ws_event(changed(DELTA, stream_id="x" * 256))
    for bad in ["", "x" * 257, "a b", "lane/1", 7, None]:
        with pytest.raises(AssertionError, match="stream_id"):
            validate_ws_event(changed(DELTA, stream_id=bad))
    # Stripping stream_id does not hide other errors.
    with pytest.raises(AssertionError, match="'delta' is a required property"):
        validate_ws_event(changed(without(DELTA, "delta"), stream_id="main"))


def test_input_items_need_ids_and_statuses() -> None:
    user = {
        "type": "message",
        "id": "msg_in",
        "status": "completed",
        "role": "user",
        "content": [{"type": "input_text", "text": "Hi"}],
    }
    output = {
        "type": "function_call_output",
        "id": "fco_1",
        "call_id": "call_1",
        "output": '{"ok": true}',
        "status": "completed",
    }
    validate_input_item(user)
    validate_input_item(output)
    with pytest.raises(AssertionError, match="'id' is a required property"):
        validate_input_item(without(user, "id"))
    with pytest.raises(AssertionError, match="'status' is a required property"):
        validate_input_item(without(output, "status"))
    with pytest.raises(AssertionError, match="unknown type"):
        validate_input_item(changed(user, type="item_reference"))

    page = {"object": "list", "data": [user, output], "first_id": "msg_in", "last_id": "fco_1"}
    validate_input_items_page({**page, "has_more": False})
    with pytest.raises(AssertionError, match="'has_more' is a required property"):
        validate_input_items_page(page)


def test_error_bodies_need_all_four_keys() -> None:
    body = {"error": {"message": "no", "type": "invalid_request_error", "code": None}}
    validate_error_body({"error": {**body["error"], "param": None}})
    validate_error_body({"error": {**body["error"], "code": "x", "param": "input"}})
    with pytest.raises(AssertionError, match=r"\$.error: 'param' is a required property"):
        validate_error_body(body)
    with pytest.raises(AssertionError, match=r"\$.error.message: 5 is not of type 'string'"):
        validate_error_body({"error": {**body["error"], "param": None, "message": 5}})
    with pytest.raises(AssertionError, match="'error' is a required property"):
        validate_error_body({"message": "no"})


def test_sse_bodies_are_checked_event_by_event() -> None:
    def frame(event: dict, name: str | None = None) -> str:
        head = f"event: {name or event['type']}\n" if name != "" else ""
        return f"{head}data: {json.dumps(event)}\n\n"

    done = {"type": "response.completed", "sequence_number": 5, "response": RESPONSE}
    body = ": keepalive\n\n" + frame(DELTA) + frame(done, "")
    assert [e["type"] for e in validate_sse_body(body)] == [DELTA["type"], "response.completed"]
    validate_sse_body(body + "data: [DONE]\n\n", require_done=True)
    with pytest.raises(AssertionError, match="does not end with"):
        validate_sse_body(body, require_done=True)
    with pytest.raises(AssertionError, match="more events follow"):
        validate_sse_body("data: [DONE]\n\n" + body)
    with pytest.raises(AssertionError, match=r"event: 'response\.created' but type"):
        validate_sse_body(frame(DELTA, "response.created"))
    with pytest.raises(AssertionError, match="not JSON"):
        validate_sse_body("data: {oops\n\n")
    with pytest.raises(AssertionError, match="'delta' is a required property"):
        validate_sse_body(frame(without(DELTA, "delta")))
