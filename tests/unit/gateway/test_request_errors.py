"""A create body's errors, found by its model (turnpike.gateway.protocol.create_body) and
worded by ``model_errors``: the ``param`` path as the API writes it, the API's ``code``,
and the messages the hand-written checks gave before the models."""

from __future__ import annotations

import pytest

from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.request import parse_create

FUNCTION = {"type": "function", "name": "read_file"}


def refused(websocket: bool = False, **body: object) -> ApiError:
    with pytest.raises(ApiError) as err:
        parse_create({"input": "hi", **body}, default_model="m", websocket=websocket)
    assert err.value.status == 400
    return err.value


@pytest.mark.parametrize(
    ("body", "param", "code", "message"),
    [
        (
            {"max_output_tokens": 3},
            "max_output_tokens",
            "integer_below_min_value",
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value "
            ">= 16, but got 3 instead.",
        ),
        (
            {"temperature": 5},
            "temperature",
            "invalid_value",
            "Invalid 'temperature': 5 is out of range; expected a number from 0.0 to 2.0.",
        ),
        (
            {"top_logprobs": 21},
            "top_logprobs",
            "invalid_value",
            "Invalid 'top_logprobs': 21 is out of range; expected an integer from 0 to 20.",
        ),
        (
            {"prompt_cache_key": "k" * 65},
            "prompt_cache_key",
            "string_above_max_length",
            "Invalid 'prompt_cache_key': string too long. Expected a string with maximum "
            "length 64, but got a string with length 65 instead.",
        ),
        (
            {"top_p": "high"},
            "top_p",
            "invalid_type",
            "Invalid type for 'top_p': expected a number.",
        ),
        (
            {"tools": [{"type": "teleport"}]},
            "tools[0].type",
            "unsupported_tool_type",
            "Tools of type 'teleport' are not supported by this server; use function or "
            "custom tools (alone or in a namespace).",
        ),
        (
            {"tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "mcp"}]}]},
            "tools[0].tools[0].type",
            "unsupported_tool_type",
            None,
        ),
        ({"tools": [{"type": "function", "name": "a b"}]}, "tools[0].name", "invalid_value", None),
        (
            {"tools": [{"type": "custom", "name": "c", "format": {"type": "bnf"}}]},
            "tools[0].format.type",
            "invalid_value",
            None,
        ),
        ({"tool_choice": {"type": "web_search"}}, "tool_choice.type", "invalid_value", None),
        ({"tool_choice": 7}, "tool_choice", "invalid_type", None),
        ({"text": {"format": {"type": "xml"}}}, "text.format", "invalid_value", None),
        (
            {"text": {"format": {"type": "json_schema", "schema": {}}}},
            "text.format.name",
            "missing_required_parameter",
            "Missing required parameter: 'text.format.name'.",
        ),
        ({"reasoning": {"effort": "max"}}, "reasoning.effort", "invalid_value", None),
        ({"include": ["everything"]}, "include[0]", "invalid_value", None),
        ({"conversation": ""}, "conversation", "invalid_type", None),
        (
            {"context_management": [{"type": "compaction", "compact_threshold": 0}]},
            "context_management[0].compact_threshold",
            "invalid_value",
            None,
        ),
    ],
)
def test_an_error_names_its_parameter_and_code(body, param, code, message) -> None:
    err = refused(**body)
    assert (err.param, err.code) == (param, code), err.message
    if message is not None:
        assert err.message == message


def test_a_chat_completions_tool_is_named_at_its_missing_name() -> None:
    """``{"type": "function", "function": {...}}`` (the Chat Completions shape): the
    union's tag ``function`` in pydantic's location is no path of the request."""
    tool = {"type": "function", "function": {"name": "read_file"}}
    assert refused(tools=[tool]).param == "tools[0].name"


def test_a_null_is_an_absent_value() -> None:
    request = parse_create(
        {"input": "hi", "model": None, "text": {"format": None, "verbosity": None}},
        default_model="m",
    )
    assert request.model == "m" and request.text == {"format": {"type": "text"}}
    assert refused(tools=[FUNCTION], tool_choice={"type": "function"}).code == (
        "missing_required_parameter"
    )


def test_the_websocket_body_has_a_lane() -> None:
    assert refused(websocket=True, stream_id="no spaces").code == "invalid_stream_id"
    # Over HTTP, stream_id is no field: ignored, as any unknown key.
    parse_create({"input": "hi", "stream_id": 5}, default_model="m")
