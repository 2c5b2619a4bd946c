"""Request validation: every accepted shape, and a clear 400 for the rest."""

import pytest

from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.items import check_call_outputs, normalize_input, to_proto
from turnpike.gateway.protocol.request import parse_create


def parse(body, **kw):
    return parse_create(body, default_model="turnpike-sim", **kw)


def test_string_input_becomes_one_user_message():
    req = parse({"input": "hello"})
    assert req.model == "turnpike-sim"
    [item] = req.input_items
    assert item["type"] == "message" and item["role"] == "user"
    assert item["content"] == [{"type": "input_text", "text": "hello"}]
    assert item["id"].startswith("msg_") and item["status"] == "completed"


def test_echoed_output_items_are_accepted():
    items = normalize_input(
        [
            {"role": "user", "content": "weather?"},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "get_weather",
                "arguments": '{"city":"Paris"}',
                "status": "completed",
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {
                "type": "message",
                "id": "msg_9",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}],
            },
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"},
        ]
    )
    assert [i["type"] for i in items] == [
        "message",
        "function_call",
        "function_call_output",
        "message",
        "reasoning",
    ]
    assert items[1]["id"] == "fc_1"
    names: dict[str, str] = {}
    protos = to_proto(items, names)
    assert len(protos) == 4  # reasoning carries nothing to render
    assert protos[2].name == "get_weather" and protos[2].text == "sunny"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": 5}, "input"),
        ({"input": "x", "model": 3}, "model"),
        ({"input": "x", "temperature": "hot"}, "temperature"),
        ({"input": "x", "temperature": True}, "temperature"),
        ({"input": "x", "max_output_tokens": "many"}, "max_output_tokens"),
        ({"input": "x", "tools": {"type": "function"}}, "tools"),
        ({"input": "x", "tools": [{"type": "function", "name": "a b"}]}, "tools[0].name"),
        ({"input": "x", "tools": [{"type": "teleport", "name": "patch"}]}, "tools[0].type"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": 7}]}, "input[0].content"),
        ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output"),
        ({"input": "x", "metadata": {"a": 1}}, "metadata.a"),
        ({"input": "x", "store": "yes"}, "store"),
        ({"input": "x", "tool_choice": "sometimes"}, "tool_choice"),
        ({"input": "x", "background": True, "store": False}, "background"),
        ({"input": "x", "background": "yes"}, "background"),
        ({"input": "x", "previous_response_id": 12}, "previous_response_id"),
        ({}, "input"),
    ],
)
def test_bad_fields_name_their_parameter(body, param):
    with pytest.raises(ApiError) as err:
        parse(body)
    assert err.value.status == 400
    assert err.value.param == param
    assert err.value.code
    body = err.value.body()["error"]
    assert set(body) == {"message", "type", "code", "param"}


def test_unknown_top_level_keys_are_ignored():
    assert parse({"input": "x", "some_extra_body_key": {"a": 1}}).input_items


def test_websocket_stream_id_is_checked():
    assert parse({"input": "x", "stream_id": "lane-1"}, websocket=True).stream_id == "lane-1"
    with pytest.raises(ApiError) as err:
        parse({"input": "x", "stream_id": "no spaces"}, websocket=True)
    assert err.value.code == "invalid_stream_id"


def test_function_call_output_must_answer_a_known_call():
    history = normalize_input(
        [{"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}]
    )
    check_call_outputs(
        history,
        normalize_input([{"type": "function_call_output", "call_id": "call_1", "output": "ok"}]),
    )
    with pytest.raises(ApiError) as err:
        check_call_outputs(
            history,
            normalize_input(
                [{"type": "function_call_output", "call_id": "call_2", "output": "ok"}]
            ),
        )
    assert err.value.code == "invalid_function_call_output"
    assert err.value.param == "input[0].call_id"
