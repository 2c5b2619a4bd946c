"""The WebSocket protocol state machine, without a socket or a clock."""

import json
import subprocess
import sys

import pytest
from support.ws_sessions import session_settings

from turnpike.gateway.api.websocket_protocol import (
    CloseConnection,
    SendEvent,
    StartResponse,
    WsSession,
)

T0 = 1000.0  # the session's clock is whatever the caller passes as ``now``
LIFETIME = 60.0


class Session(WsSession):
    """A session whose calls default to a moment well inside its lifetime."""

    def on_frame(self, data, now=T0):
        return super().on_frame(data, now)

    def on_response_done(self, request, now=T0, ended=None):
        return super().on_response_done(request, now, ended)


def session(**kw):
    return Session(**session_settings(lifetime_s=LIFETIME, now=T0, **kw))


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


def lanes_of(actions):
    return [a.request.stream_id for a in actions if isinstance(a, StartResponse)]


def inputs_of(actions):
    return [
        a.request.input_items[0]["content"][0]["text"]
        for a in actions
        if isinstance(a, StartResponse)
    ]


def test_creates_on_a_busy_lane_wait_and_run_in_order():
    s = session()
    [first] = s.on_frame(create(stream_id="a", input="one"))
    assert s.on_frame(create(stream_id="a", input="two")) == []  # queued, not refused
    assert s.on_frame(create(stream_id="a", input="three")) == []
    assert s.queued == 2
    [second] = s.on_response_done(first.request)
    assert inputs_of([second]) == ["two"]
    [third] = s.on_response_done(second.request)
    assert inputs_of([third]) == ["three"] and s.queued == 0
    assert s.on_response_done(third.request) == [] and s.idle


def test_a_busy_lane_does_not_hold_up_another_lane():
    s = session(max_lanes=5)
    s.on_frame(create(stream_id="a"))
    s.on_frame(create(stream_id="a"))
    assert lanes_of(s.on_frame(create(stream_id="b"))) == ["b"]


def test_the_default_lane_is_fifo_too():
    s = session()
    [first] = s.on_frame(create(input="one"))
    assert s.on_frame(create(input="two")) == []
    assert inputs_of(s.on_response_done(first.request)) == ["two"]


def test_an_invalid_create_on_a_busy_lane_is_answered_at_once_not_queued():
    s = session()
    s.on_frame(create(stream_id="a"))
    event = only_error(s.on_frame(create(stream_id="a", temperature="hot")))
    assert event["stream_id"] == "a" and event["error"]["param"] == "temperature"
    assert s.queued == 0


def test_the_queue_is_bounded_per_connection_with_an_error_on_the_lane():
    s = session(max_queued=2, max_lanes=5)
    [first] = s.on_frame(create(stream_id="a"))
    s.on_frame(create(stream_id="a"))
    s.on_frame(create(stream_id="a"))
    event = only_error(s.on_frame(create(stream_id="a")))
    assert event["status"] == 429 and event["stream_id"] == "a"
    assert event["error"]["code"] == "websocket_queue_limit_reached"
    assert event["error"]["param"] == "stream_id"
    # A free lane needs no place in the queue.
    assert lanes_of(s.on_frame(create(stream_id="b"))) == ["b"]
    s.on_response_done(first.request)  # one waiting create starts: room for one more
    assert s.on_frame(create(stream_id="a")) == [] and s.queued == 2


def test_creates_waiting_for_a_slot_count_against_the_queue():
    s = session(max_active=1, max_queued=1, max_lanes=5)
    s.on_frame(create(stream_id="a"))
    assert s.on_frame(create(stream_id="b")) == []
    event = only_error(s.on_frame(create(stream_id="c")))
    assert event["error"]["code"] == "websocket_queue_limit_reached"
    assert event["stream_id"] == "c"


def test_lane_followers_and_other_lanes_share_the_active_slots_in_order():
    s = session(max_active=1, max_lanes=5)
    [a1] = s.on_frame(create(stream_id="a", input="a1"))
    s.on_frame(create(stream_id="a", input="a2"))  # behind a1 on its lane
    s.on_frame(create(stream_id="b", input="b1"))  # waits for the slot since now
    [next_] = s.on_response_done(a1.request)
    assert inputs_of([next_]) == ["b1"]  # ready first
    assert inputs_of(s.on_response_done(next_.request)) == ["a2"]


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


def test_a_steer_naming_no_response_of_the_connection_is_response_not_found():
    [action] = session().on_frame(
        json.dumps({"type": "response.steer", "previous_response_id": "resp_1", "input": "x"})
    )
    assert isinstance(action, SendEvent)
    assert action.event["type"] == "response.steer.failed"
    assert action.event["error"]["code"] == "response_not_found"
    assert action.event["steer"] == {"input": "x", "previous_response_id": "resp_1"}


def test_unknown_event_type():
    assert (
        only_error(session().on_frame('{"type":"response.cancel"}'))["error"]["code"]
        == "unknown_event_type"
    )


@pytest.mark.parametrize(
    "frame",
    [
        {"type": "response.processed", "response_id": "resp_1"},
        {"type": "response.processed", "response_id": "not-an-id"},  # unknown: still ignored
        {"type": "response.processed"},
    ],
)
def test_an_acknowledgement_is_ignored(frame: dict) -> None:
    ws = session()
    assert ws.on_frame(json.dumps(frame)) == []
    assert not ws.closed and isinstance(ws.on_frame(create())[0], StartResponse)


def test_an_unknown_event_type_is_an_error_on_its_lane():
    event = only_error(session().on_frame('{"type":"response.later","stream_id":"lane-2"}'))
    assert event["stream_id"] == "lane-2" and event["error"]["code"] == "unknown_event_type"


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


def test_creates_still_waiting_when_the_lifetime_ends_get_an_error_each():
    s = session(max_active=1, max_lanes=5)
    [running] = s.on_frame(create(stream_id="a"))
    s.on_frame(create(stream_id="a"))
    s.on_frame(create(stream_id="b"))
    assert s.deadline(T0 + LIFETIME + 1) == T0 + LIFETIME  # due: waiting creates to answer
    errors = s.on_timer(T0 + LIFETIME)
    assert sorted(a.event["stream_id"] for a in errors) == ["a", "b"]
    for action in errors:
        assert action.event["error"]["code"] == "websocket_connection_limit_reached"
    assert s.queued == 0 and s.deadline(T0 + LIFETIME) is None
    # The running response finishes; nothing else starts, and the socket closes.
    [close] = s.on_response_done(running.request, now=T0 + LIFETIME + 5)
    assert isinstance(close, CloseConnection) and close.code == 1001


def test_a_response_ending_after_the_lifetime_starts_nothing_even_before_the_timer():
    s = session()
    [running] = s.on_frame(create(stream_id="a"))
    s.on_frame(create(stream_id="a"))
    actions = s.on_response_done(running.request, now=T0 + LIFETIME)
    assert [type(a) for a in actions] == [SendEvent, CloseConnection]
    assert actions[0].event["stream_id"] == "a"


def test_a_disconnect_drops_the_waiting_creates_and_starts_nothing_more():
    s = session(max_active=1, max_lanes=5)
    [running] = s.on_frame(create(stream_id="a"))
    s.on_frame(create(stream_id="a"))
    s.on_frame(create(stream_id="b"))
    s.on_disconnect()
    assert s.queued == 0
    assert s.on_response_done(running.request, now=T0 + 1) == []
    assert s.idle


def test_the_protocol_core_imports_without_io_libraries():
    """The sans-I/O core needs none of the gateway's transports or backends."""
    blocked = ("grpc", "redis", "opentelemetry", "PIL", "fastapi", "starlette", "uvicorn")
    code = (
        "import sys\n"
        f"for name in {blocked!r}: sys.modules[name] = None\n"
        "import turnpike.gateway.api.websocket_protocol\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_drain_closes_an_idle_connection_with_1012_after_its_idle_grace():
    """A close sent to an idle socket races the client's next create: a create the client
    sent before the close reached it is dropped, and the SDK does not send it again (it
    was sent). So an idle socket gets ``drain_idle_s`` to send one, first."""
    ws = session(drain_idle_s=2.0)
    assert ws.on_drain(T0) == []
    assert ws.deadline(T0) == T0 + 2.0
    assert ws.on_timer(T0 + 1.0) == []
    [close] = ws.on_timer(T0 + 2.0)
    assert isinstance(close, CloseConnection) and close.code == 1012
    [close] = session(drain_idle_s=0.0).on_drain(T0)  # no grace: at once
    assert isinstance(close, CloseConnection)


def test_a_drain_closes_right_after_the_terminal_event_of_a_create_sent_in_the_grace():
    """Right after a terminal event the client is busy with it (its tools, its next
    request): the moment a close races nothing."""
    ws = session(drain_idle_s=2.0)
    assert ws.on_drain(T0) == []
    [started] = ws.on_frame(create(), T0 + 0.5)
    assert isinstance(started, StartResponse)
    assert ws.deadline(T0 + 0.5) == T0 + LIFETIME  # a response runs: no idle grace
    [close] = ws.on_response_done(started.request, T0 + 0.7)
    assert isinstance(close, CloseConnection) and close.code == 1012


def test_a_drain_waits_for_running_and_queued_responses_then_closes():
    ws = session(max_active=1)
    [first] = ws.on_frame(create(stream_id="a"))
    assert ws.on_frame(create(stream_id="a")) == []  # queued behind it
    assert ws.on_drain(T0) == []
    [second] = ws.on_response_done(first.request)  # the queued one still runs
    assert isinstance(second, StartResponse)
    # A create sent during the drain is served too: the client's frame is never lost.
    assert ws.on_frame(create(stream_id="b")) == []  # it waits for the one slot
    [started] = ws.on_response_done(second.request)
    assert isinstance(started, StartResponse)
    [close] = ws.on_response_done(started.request)
    assert isinstance(close, CloseConnection) and close.code == 1012
