"""The WebSocket protocol state machine, without a socket."""

import json

from gateway.ws_protocol import SendEvent, StartResponse, WsSession


def session(**kw):
    defaults = dict(
        default_model="m", max_frame_bytes=10_000, max_active=2, max_lanes=2, cache_size=8
    )
    defaults.update(kw)
    return WsSession(**defaults)


def create(**fields):
    return json.dumps({"type": "response.create", "input": "hi", **fields})


def only_error(actions):
    [action] = actions
    assert isinstance(action, SendEvent)
    assert action.event["type"] == "error"
    assert isinstance(action.event["status"], int)
    return action.event


def test_create_starts_a_response_and_ignores_stream_true():
    [action] = session().on_frame(create(stream=True))
    assert isinstance(action, StartResponse)
    assert action.request.input_items[0]["role"] == "user"


def test_malformed_json_is_an_error_event_not_a_close():
    s = session()
    event = only_error(s.on_frame("{not json"))
    assert event["error"]["code"] == "invalid_json"
    assert isinstance(s.on_frame(create())[0], StartResponse)


def test_second_create_on_a_busy_lane_is_refused_with_its_lane():
    s = session()
    [start] = s.on_frame(create(stream_id="a"))
    event = only_error(s.on_frame(create(stream_id="a")))
    assert event["error"]["code"] == "stream_busy" and event["stream_id"] == "a"
    s.on_response_done(start.request)
    assert isinstance(s.on_frame(create(stream_id="a"))[0], StartResponse)


def test_lanes_run_in_parallel_up_to_the_active_limit_then_queue():
    s = session(max_active=2, max_lanes=5)
    first = s.on_frame(create(stream_id="a"))[0]
    s.on_frame(create(stream_id="b"))
    assert s.on_frame(create(stream_id="c")) == []  # queued, not refused
    [started] = s.on_response_done(first.request)
    assert started.request.stream_id == "c"


def test_named_lane_limit_excludes_the_default_lane():
    s = session(max_active=10, max_lanes=2)
    s.on_frame(create())
    s.on_frame(create(stream_id="a"))
    s.on_frame(create(stream_id="b"))
    event = only_error(s.on_frame(create(stream_id="c")))
    assert event["error"]["code"] == "websocket_stream_limit_reached"


def test_oversized_frame_gets_a_413_error():
    event = only_error(session(max_frame_bytes=100).on_frame(create(input="x" * 200)))
    assert event["status"] == 413 and event["error"]["code"] == "request_too_large"


def test_invalid_request_echoes_the_lane():
    event = only_error(session().on_frame(create(stream_id="z", temperature="hot")))
    assert event["stream_id"] == "z" and event["error"]["param"] == "temperature"


def test_steer_is_answered_with_steering_not_supported():
    [action] = session().on_frame(
        json.dumps({"type": "response.steer", "previous_response_id": "resp_1", "input": "x"})
    )
    assert action.event["type"] == "response.steer.failed"
    assert action.event["error"]["code"] == "steering_not_supported"


def test_unknown_event_type():
    assert (
        only_error(session().on_frame('{"type":"response.cancel"}'))["error"]["code"]
        == "unknown_event_type"
    )


def test_expired_connection_refuses_new_creates():
    s = session()
    s.expired = True
    assert only_error(s.on_frame(create()))["error"]["code"] == "websocket_connection_limit_reached"
