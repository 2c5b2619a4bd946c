"""Bounds on input (turnpike.gateway.protocol.bounds, json_codec, errors): a hostile body gets a 400 naming
the parameter, checked before any backend sees it, and error messages stay safe to send
whatever the client put in them."""

from __future__ import annotations

import json

import orjson
import pytest
from support.ws_sessions import session_settings

from turnpike.gateway.api.websocket_protocol import SendEvent, WsSession
from turnpike.gateway.protocol.bounds import MAX_JSON_DEPTH, MAX_MODEL_CHARS, check_create
from turnpike.gateway.protocol.errors import MAX_MESSAGE_CHARS, ApiError, echo, invalid, not_found
from turnpike.gateway.protocol.json_codec import parse_json
from turnpike.gateway.protocol.request import parse_create


def nested(depth: int) -> str:
    """``{"input": ...}`` whose deepest list is ``depth`` levels down (the object is 1)."""
    return '{"input":' + "[" * (depth - 1) + "]" * (depth - 1) + "}"


def error_of(fn, *args) -> ApiError:
    with pytest.raises(ApiError) as caught:
        fn(*args)
    return caught.value


def test_nesting_up_to_the_bound_parses() -> None:
    body = parse_json(nested(MAX_JSON_DEPTH))
    assert isinstance(body["input"], list)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1000, 10_000])
def test_nesting_past_the_bound_is_a_400_saying_so(depth: int) -> None:
    err = error_of(parse_json, nested(depth).encode())
    assert (err.status, err.code) == (400, "json_too_deep")
    assert f"{MAX_JSON_DEPTH} levels" in err.message
    # Below the parser's own limit the parameter is known; past it, the body is refused
    # before its structure is.
    assert err.param == ("input" if depth < 1024 else None)


def test_many_shallow_brackets_are_not_nesting() -> None:
    body = {"input": [{"type": "message", "role": "user", "content": "x"}] * 500}
    assert len(parse_json(json.dumps(body))["input"]) == 500


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (rb'{"input": "\ud800"}', "input"),
        (rb'{"input": "ok", "previous_response_id": "\udc00abc"}', "previous_response_id"),
        (rb'{"input": [{"role": "user", "content": "a\ud800"}]}', "input[0].content"),
        (b'{"input": "\xed\xa0\x80"}', "input"),  # the surrogate as raw UTF-8 bytes
    ],
)
def test_a_lone_surrogate_is_a_400_naming_where_it_is(raw: bytes, param: str) -> None:
    err = error_of(parse_json, raw)
    assert (err.status, err.code, err.param) == (400, "invalid_unicode", param)
    assert orjson.dumps(err.body())  # and the error itself encodes


def test_a_model_name_over_the_bound_is_a_400_on_model() -> None:
    check_create({"model": "m" * MAX_MODEL_CHARS}, 300, 1000)
    err = error_of(check_create, {"model": "m" * (5 * 1024 * 1024)}, 5 * 1024 * 1024, 1000)
    assert (err.status, err.param) == (400, "model")
    assert len(err.message) < 200  # it does not echo the name


def test_input_characters_over_the_bound_are_a_400_naming_the_largest_parameter() -> None:
    body = {"model": "m", "instructions": "i" * 10, "input": [{"content": "x" * 100}]}
    check_create(body, 10_000, 200)
    err = error_of(check_create, body, 10_000, 100)
    assert (err.status, err.code, err.param) == (400, "input_too_large", "input")
    # A body smaller than the bound in bytes is never counted.
    check_create({"input": "x" * 100}, 99, 100)


@pytest.mark.parametrize(
    ("field", "value", "param"),
    [
        ("stream_options", "yes", "stream_options"),
        ("stream_options", [True], "stream_options"),
        ("stream_options", {"include_obfuscation": "no"}, "stream_options.include_obfuscation"),
        ("include", "reasoning.encrypted_content", "include"),
        ("include", {"a": 1}, "include"),
        ("include", [1], "include[0]"),
    ],
)
def test_include_and_stream_options_of_a_wrong_type_are_400s(field, value, param) -> None:
    err = error_of(lambda: parse_create({"input": "hi", field: value}, default_model="m"))
    assert (err.status, err.param) == (400, param)


def test_stream_options_of_the_right_shape_are_accepted() -> None:
    body = {"input": "hi", "stream_options": {"include_obfuscation": False}}
    assert parse_create(body, default_model="m").model == "m"


def test_error_messages_bound_and_escape_what_they_echo() -> None:
    hostile = "\ud800" + "x" * 5_000_000
    err = not_found(f"Response with id {echo(hostile)} not found.", "response_id")
    assert len(err.message) < 300 and "\\ud800" in err.message
    assert orjson.dumps(err.body())
    # Any message and param, however built, leave encodable and bounded.
    raw = invalid("bad \udfff" + "y" * 10_000, "param\ud800" + "z" * 10_000)
    assert len(raw.message) <= MAX_MESSAGE_CHARS and orjson.dumps(raw.body())
    assert orjson.dumps(raw.ws_event("lane"))


def ws_session(**kw) -> WsSession:
    return WsSession(**session_settings(max_frame_bytes=10_000_000, now=0.0, **kw))


def ws_error(actions) -> dict:
    [action] = actions
    assert isinstance(action, SendEvent) and action.event["type"] == "error"
    return action.event["error"]


@pytest.mark.parametrize(
    ("frame", "param"),
    [
        ('{"type": "response.create", "input": "\\ud800"}', "input"),
        ('{"type": "response.create", "input": ' + "[" * 100 + "]" * 100 + "}", "input"),
        ('{"type": "response.create", "input": "hi", "stream_options": 5}', "stream_options"),
        ('{"type": "response.create", "input": "hi", "model": "' + "m" * 300 + '"}', "model"),
        ('{"type": "response.create", "input": "' + "x" * 2000 + '"}', "input"),
    ],
)
def test_websocket_frames_get_the_same_bounds(frame: str, param: str) -> None:
    error = ws_error(ws_session(max_input_chars=1000).on_frame(frame, 0.0))
    assert error["param"] == param


def test_an_unknown_event_type_is_echoed_bounded() -> None:
    error = ws_error(ws_session().on_frame(json.dumps({"type": "t" * 100_000}), 0.0))
    assert error["param"] == "type" and len(error["message"]) < 300
