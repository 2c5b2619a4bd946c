"""The WebSocket protocol state machine, without a socket or a clock."""

import json
import subprocess
import sys

from gateway.ws_protocol import CloseConnection, SendEvent, StartResponse, WsSession

T0 = 1000.0  # the session's clock is whatever the caller passes as ``now``
LIFETIME = 60.0


class Session(WsSession):
    """A session whose calls default to a moment well inside its lifetime."""

    def on_frame(self, data, now=T0):
        return super().on_frame(data, now)

    def on_response_done(self, request, now=T0):
        return super().on_response_done(request, now)


def session(**kw):
    defaults = dict(
        default_model="m",
        max_frame_bytes=10_000,
        max_active=2,
        max_lanes=2,
        cache_size=8,
        lifetime_s=LIFETIME,
        now=T0,
    )
    defaults.update(kw)
    return Session(**defaults)


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


def test_frame_limit_counts_utf8_bytes_not_characters():
    # 41 characters of a four-byte letter: 164 bytes on the wire (plus the JSON around).
    frame = json.dumps({"type": "response.create", "input": "\U0001f600" * 41}, ensure_ascii=False)
    assert len(frame) < 200 <= len(frame.encode())
    event = only_error(session(max_frame_bytes=200).on_frame(frame))
    assert event["status"] == 413
    assert isinstance(
        session(max_frame_bytes=len(frame.encode())).on_frame(frame)[0], StartResponse
    )
    assert only_error(session(max_frame_bytes=200).on_frame(frame.encode()))["status"] == 413


def test_lifetime_refuses_creates_once_over():
    s = session()
    assert isinstance(s.on_frame(create(), now=T0 + LIFETIME - 1)[0], StartResponse)
    event = only_error(s.on_frame(create(stream_id="b"), now=T0 + LIFETIME))
    assert event["error"]["code"] == "websocket_connection_limit_reached"


def test_an_idle_connection_closes_at_its_deadline():
    s = session()
    assert s.deadline(T0) == T0 + LIFETIME
    assert s.on_timer(T0 + LIFETIME - 0.001) == []  # early wake-up: nothing to do
    [close] = s.on_timer(T0 + LIFETIME)
    assert close == CloseConnection(1001, "connection lifetime of 60s reached")
    assert s.closed and s.deadline(T0 + LIFETIME) is None and s.on_timer(T0 + 2 * LIFETIME) == []


def test_a_busy_connection_closes_when_its_last_response_ends():
    s = session()
    [start] = s.on_frame(create())
    # Past the lifetime no timer is due while a response runs; its end closes the socket.
    assert s.on_timer(T0 + LIFETIME) == []
    assert s.deadline(T0 + LIFETIME) is None
    [close] = s.on_response_done(start.request, now=T0 + LIFETIME + 5)
    assert isinstance(close, CloseConnection) and close.code == 1001


def test_a_response_that_ends_in_time_leaves_the_deadline_standing():
    s = session()
    [start] = s.on_frame(create())
    assert s.deadline(T0) == T0 + LIFETIME
    assert s.on_response_done(start.request) == []
    assert not s.closed and s.deadline(T0 + 1) == T0 + LIFETIME


def test_the_protocol_core_imports_without_io_libraries():
    """The sans-I/O core needs none of the gateway's transports or backends."""
    blocked = ("grpc", "redis", "opentelemetry", "PIL", "fastapi", "starlette", "uvicorn")
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "import gateway.ws_protocol\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
