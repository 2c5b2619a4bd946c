"""``response.steer`` in the connection's protocol core, sans I/O: which steer is taken,
which refused with which code, and what follows a steered response (a successor, a
pending steer, or the input returned). Every event is checked against the official
``openai`` package's types for it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.responses import (
    ResponseSteerAcceptedEvent,
    ResponseSteerFailedEvent,
    ResponseSteerPendingEvent,
)
from pydantic import BaseModel
from support.ws_sessions import session_settings

from turnpike.gateway.api.websocket_protocol import SendEvent, StartResponse, WsSession
from turnpike.gateway.api.websocket_steering import Ended, SteerRunning, ended_from
from turnpike.gateway.protocol.events import ResponseEvents
from turnpike.gateway.protocol.request import CreateRequest
from turnpike.gateway.protocol.steering import SteerSignal, required_input

NOW = 1000.0
MODELS: dict[str, type[BaseModel]] = {
    "response.steer.accepted": ResponseSteerAcceptedEvent,
    "response.steer.failed": ResponseSteerFailedEvent,
    "response.steer.pending": ResponseSteerPendingEvent,
}


def session(**kw: Any) -> WsSession:
    roomy = {"max_frame_bytes": 100_000, "max_active": 4, "max_queued": 8, "max_lanes": 4}
    return WsSession(**session_settings(**{**roomy, "now": NOW, "max_pending_steers": 2, **kw}))


def checked(event: dict[str, Any]) -> dict[str, Any]:
    MODELS[event["type"]].model_validate(event)
    return event


def start(ws: WsSession, response_id: str = "resp_1", **fields: Any) -> CreateRequest:
    """A create started and its response.created sent: ``response_id`` now runs."""
    frame = json.dumps({"type": "response.create", "input": "hi", **fields})
    [action] = ws.on_frame(frame, NOW)
    assert isinstance(action, StartResponse)
    ws.on_response_started(action.request, response_id)
    return action.request


def steer(ws: WsSession, target: str = "resp_1", steer_input: Any = "go left", **extra: Any):
    frame = {"type": "response.steer", "previous_response_id": target, "input": steer_input}
    return ws.on_frame(json.dumps({**frame, **extra}), NOW)


def failure(actions: list[Any], echoes_valid_input: bool = True) -> dict[str, Any]:
    """The one steer.failed event answered. Input that is not valid steer input is
    echoed as sent, which the SDK's model (not its lenient parser) would refuse."""
    [action] = actions
    assert isinstance(action, SendEvent)
    event = action.event
    assert event["type"] == "response.steer.failed"
    if echoes_valid_input:
        return checked(event)
    assert isinstance(event["sequence_number"], int)
    assert event["error"]["type"] == "invalid_request_error"
    return event


def ended(response_id: str = "resp_1", status: str = "incomplete", output=(), seq: int = 9):
    return Ended(response_id, status, required_input(list(output)), seq)


def test_a_steer_of_a_running_response_is_accepted_on_its_lane() -> None:
    ws = session()
    start(ws, stream_id="main")
    [action] = steer(ws)
    assert isinstance(action, SteerRunning) and action.response_id == "resp_1"
    event = action.event
    assert event["type"] == "response.steer.accepted" and event["stream_id"] == "main"
    assert event["steer"]["id"].startswith("steer_")
    assert event["steer"]["previous_response_id"] == "resp_1"
    assert "sequence_number" not in event  # the response's stream numbers it


def test_the_successor_continues_the_steered_response_with_its_settings() -> None:
    ws = session()
    request = start(ws, stream_id="main", instructions="Be terse.", max_output_tokens=50)
    steer(ws, steer_input="first")
    steer(ws, steer_input=[{"role": "user", "content": [{"type": "input_text", "text": "then"}]}])
    actions = ws.on_response_done(request, NOW, ended())
    [start_successor] = actions
    assert isinstance(start_successor, StartResponse) and start_successor.successor
    successor = start_successor.request
    assert successor.previous_response_id == "resp_1"
    assert (successor.instructions, successor.max_output_tokens) == ("Be terse.", 50)
    assert successor.stream_id == "main"
    texts = [item["content"][0]["text"] for item in successor.input_items]
    assert texts == ["first", "then"]  # in submission order
    assert len(start_successor.steers) == 2


def test_a_successor_keeps_its_slot_and_goes_before_the_creates_queued_on_its_lane() -> None:
    ws = session(max_active=1)
    request = start(ws, stream_id="main")
    assert (
        ws.on_frame(json.dumps({"type": "response.create", "input": "b", "stream_id": "main"}), NOW)
        == []
    )
    steer(ws)
    [successor] = ws.on_response_done(request, NOW, ended())
    assert isinstance(successor, StartResponse) and successor.successor
    ws.on_response_started(successor.request, "resp_2")
    # The successor ends: the create queued behind it starts, in the one slot.
    [queued] = ws.on_response_done(successor.request, NOW, ended("resp_2", "completed"))
    assert isinstance(queued, StartResponse) and not queued.successor
    assert queued.request.input_items[0]["content"][0]["text"] == "b"


def test_a_response_waiting_on_client_tools_keeps_the_steer_pending() -> None:
    ws = session()
    request = start(ws, stream_id="main")
    [accepted] = steer(ws)
    assert isinstance(accepted, SteerRunning)
    call = {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"}
    actions = ws.on_response_done(request, NOW, ended(status="completed", output=[call], seq=20))
    [pending] = actions
    assert isinstance(pending, SendEvent)
    event = checked(pending.event)
    assert event["type"] == "response.steer.pending" and event["sequence_number"] == 21
    assert event["required_input"] == [
        {"type": "function_call_output", "call_id": "call_1", "name": "ls"}
    ]
    assert event["steer"]["id"] == accepted.event["steer"]["id"]
    # The client's continuation gets the steer first in its input.
    output = {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"}
    frame = {
        "type": "response.create",
        "input": [output],
        "previous_response_id": "resp_1",
        "stream_id": "main",
    }
    [go] = ws.on_frame(json.dumps(frame), NOW)
    assert isinstance(go, StartResponse) and not go.successor and len(go.steers) == 1
    assert [item["type"] for item in go.request.input_items] == ["message", "function_call_output"]


def test_a_create_that_does_not_continue_the_waiting_response_returns_its_steers() -> None:
    ws = session()
    request = start(ws)
    steer(ws, steer_input="wait")
    call = {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"}
    ws.on_response_done(request, NOW, ended(status="completed", output=[call]))
    returned, go = ws.on_frame(json.dumps({"type": "response.create", "input": "new"}), NOW)
    assert isinstance(returned, SendEvent) and isinstance(go, StartResponse)
    event = checked(returned.event)
    assert event["error"]["code"] == "response_not_active"
    assert event["steer"]["input"] == "wait" and event["steer"]["id"].startswith("steer_")
    assert go.steers == ()


def test_a_steer_of_a_response_already_waiting_on_tools_is_accepted_and_pending() -> None:
    ws = session()
    request = start(ws)
    call = {"type": "custom_tool_call", "call_id": "call_9", "name": "apply_patch", "input": ""}
    # No steer while it ran; one sent while the client runs its tools still joins it.
    assert ws.on_response_done(request, NOW, ended(status="completed", output=[call], seq=5)) == []
    accepted, pending = steer(ws)
    assert isinstance(accepted, SendEvent) and isinstance(pending, SendEvent)
    assert checked(accepted.event)["sequence_number"] == 6
    assert checked(pending.event)["required_input"] == [
        {"type": "custom_tool_call_output", "call_id": "call_9"}
    ]


def test_a_failed_or_cancelled_response_returns_its_steers() -> None:
    for status in ("failed", "cancelled"):
        ws = session()
        request = start(ws)
        steer(ws, steer_input="x")
        [returned] = ws.on_response_done(request, NOW, ended(status=status))
        assert isinstance(returned, SendEvent)
        assert checked(returned.event)["error"]["code"] == "response_not_active"


def test_a_steer_after_the_end_is_response_already_completed() -> None:
    ws = session()
    request = start(ws)
    ws.on_response_done(request, NOW, ended(status="completed"))
    assert failure(steer(ws))["error"]["code"] == "response_already_completed"


def test_steers_are_bounded_per_response() -> None:
    ws = session(max_pending_steers=2)
    start(ws, stream_id="main")
    steer(ws)
    steer(ws)
    event = failure(steer(ws, steer_input="third"))
    assert event["error"]["code"] == "too_many_pending_steers"
    assert event["stream_id"] == "main" and event["steer"]["input"] == "third"


@pytest.mark.parametrize(
    "fields",
    [
        {"conversation": "conv_1"},
        {"context_management": [{"type": "compaction", "compact_threshold": 1000}]},
        {"generate": False},
    ],
)
def test_some_responses_cannot_be_steered(fields: dict[str, Any]) -> None:
    ws = session()
    start(ws, **fields)
    assert failure(steer(ws))["error"]["code"] == "steering_not_supported"


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        ({"input": ""}, "empty"),
        ({"input": []}, "non-empty"),
        ({"input": [{"role": "assistant", "content": "x"}]}, "'user' role"),
        ({"input": [{"type": "function_call_output", "call_id": "c", "output": "x"}]}, "'user'"),
        ({"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]}, "part"),
        ({"input": [{"role": "user", "content": "x", "id": "msg_1"}]}, "only type, role"),
        ({"input": "x", "stream_id": "main"}, "stream_id"),
        ({"input": "x", "previous_response_id": 7}, "previous_response_id"),
    ],
)
def test_invalid_steer_input_is_invalid_input_and_echoed(frame: dict[str, Any], why: str) -> None:
    ws = session()
    start(ws)
    body = {"type": "response.steer", "previous_response_id": "resp_1", **frame}
    event = failure(ws.on_frame(json.dumps(body), NOW), echoes_valid_input=False)
    assert event["error"]["code"] == "invalid_input" and why in event["error"]["message"]
    assert event["steer"]["input"] == frame["input"] and "id" not in event["steer"]


def test_a_steer_is_bounded_by_the_input_characters() -> None:
    ws = session(max_input_chars=100)
    start(ws)
    event = failure(steer(ws, steer_input="x" * 101))
    assert event["error"]["code"] == "invalid_input"


def test_steering_is_per_connection() -> None:
    one, other = session(), session()
    start(one)
    assert failure(steer(other))["error"]["code"] == "response_not_found"


def test_no_successor_once_the_connection_is_past_its_lifetime() -> None:
    ws = session()
    request = start(ws)
    steer(ws)
    actions = ws.on_response_done(request, NOW + 61, ended())
    returned = [a for a in actions if isinstance(a, SendEvent)]
    assert [checked(a.event)["error"]["code"] for a in returned] == ["successor_creation_failed"]
    assert not any(isinstance(a, StartResponse) for a in actions)


def test_the_signal_numbers_acceptances_in_the_stream_then_holds_them_once_closed() -> None:
    events = ResponseEvents({"id": "resp_1", "output": [], "status": "in_progress"})
    stream: list[dict[str, Any]] = []
    signal = SteerSignal()
    signal.attach(events, stream.append)
    stream.append(events.numbered({"type": "response.created"}))
    signal.accept({"type": "response.steer.accepted"})
    assert signal.requested and [e["sequence_number"] for e in stream] == [0, 1]
    signal.close()
    signal.accept({"type": "response.steer.accepted"})
    assert len(stream) == 2 and signal.late == [{"type": "response.steer.accepted"}]


def test_ended_from_a_terminal_event() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    response = {"id": "resp_1", "status": "completed", "output": [call]}
    got = ended_from({"type": "response.completed", "response": response}, 12)
    assert got == Ended(
        "resp_1", "completed", [{"type": "function_call_output", "call_id": "c1", "name": "f"}], 12
    )
    assert ended_from({"type": "error", "error": {}}, 0) is None
