"""``response.inject`` (beta) in the connection's protocol core and the inbox a waiting
response reads, sans I/O: which inject is committed, which refused with which code or
error, and that a commit is all or nothing. Every inject event is checked against the
official ``openai`` package's beta types."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.beta import BetaResponseInjectCreatedEvent, BetaResponseInjectFailedEvent
from support.ws_sessions import session_settings

from turnpike.gateway.api.websocket_protocol import (
    InjectRunning,
    SendEvent,
    StartResponse,
    WsSession,
)
from turnpike.gateway.api.websocket_steering import Ended
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.events import ResponseEvents
from turnpike.gateway.protocol.injection import (
    BETA_FEATURE,
    InjectInbox,
    InjectRefused,
    beta_enabled,
    parse_inject,
)
from turnpike.gateway.protocol.request import CreateRequest, parse_create

NOW = 1000.0
MULTI_AGENT: dict[str, Any] = {"multi_agent": {"enabled": True}}


def output(call_id: str = "call_1", text: str = "sunny") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def session(beta: bool = True) -> WsSession:
    return WsSession(**session_settings(max_frame_bytes=100_000, multi_agent_beta=beta))


def start(ws: WsSession, response_id: str = "resp_1", **fields: Any) -> CreateRequest:
    [action] = ws.on_frame(json.dumps({"type": "response.create", "input": "hi", **fields}), NOW)
    assert isinstance(action, StartResponse), action
    ws.on_response_started(action.request, response_id)
    return action.request


def inject(ws: WsSession, response_id: str = "resp_1", items: Any = None, **extra: Any):
    frame = {"type": "response.inject", "response_id": response_id, "input": items or [output()]}
    return ws.on_frame(json.dumps({**frame, **extra}), NOW)


def event_of(actions: list[Any]) -> dict[str, Any]:
    [action] = actions
    assert isinstance(action, SendEvent), action
    return action.event


def error_of(actions: list[Any]) -> tuple[str, str | None]:
    event = event_of(actions)
    assert event["type"] == "error", event
    return event["error"]["code"], event["error"]["param"]


# -- the beta and the create ----------------------------------------------------------------


def test_the_beta_is_named_among_comma_separated_features() -> None:
    assert beta_enabled([f"responses_websockets=2026-02-06, {BETA_FEATURE}"])
    assert not beta_enabled(["responses_websockets=2026-02-06"])
    assert not beta_enabled([])


def test_without_the_beta_an_inject_is_an_unknown_type_that_names_the_header() -> None:
    event = event_of(inject(session(beta=False)))
    assert event["error"]["code"] == "unknown_event_type"
    assert BETA_FEATURE in event["error"]["message"]


@pytest.mark.parametrize("websocket, beta", [(False, False), (True, False)])
def test_multi_agent_needs_websocket_mode_and_the_beta(websocket: bool, beta: bool) -> None:
    body = {"input": "hi", **MULTI_AGENT}
    with pytest.raises(ApiError) as refused:
        parse_create(body, default_model="m", websocket=websocket, multi_agent_beta=beta)
    assert (refused.value.status, refused.value.param) == (400, "multi_agent")
    off = parse_create(
        {"input": "hi", "multi_agent": {"enabled": False}}, default_model="m", websocket=True
    )
    assert not off.multi_agent
    on = parse_create(body, default_model="m", websocket=True, multi_agent_beta=True)
    assert on.multi_agent


def test_a_multi_agent_response_is_not_steered() -> None:
    ws = session()
    start(ws, **MULTI_AGENT)
    frame = {"type": "response.steer", "previous_response_id": "resp_1", "input": "left"}
    event = event_of(ws.on_frame(json.dumps(frame), NOW))
    assert event["type"] == "response.steer.failed"
    assert event["error"]["code"] == "steering_not_supported"


# -- which response takes it ----------------------------------------------------------------


def test_an_inject_for_a_running_multi_agent_response_goes_to_it_on_its_lane() -> None:
    ws = session()
    start(ws, stream_id="agents", **MULTI_AGENT)
    [action] = inject(ws)
    assert isinstance(action, InjectRunning)
    assert (action.response_id, action.lane) == ("resp_1", "agents")
    assert action.inject.items[0]["call_id"] == "call_1"


def test_an_unknown_response_is_response_not_found_with_the_input_returned() -> None:
    event = event_of(inject(session(), "resp_nope"))
    BetaResponseInjectFailedEvent.model_validate(event)
    assert event["error"]["code"] == "response_not_found"
    assert event["input"] == [output()]


def test_an_ended_response_is_response_already_completed() -> None:
    ws = session()
    request = start(ws, **MULTI_AGENT)
    ws.on_response_done(request, NOW, Ended("resp_1", "completed", [], 9))
    event = event_of(inject(ws))
    BetaResponseInjectFailedEvent.model_validate(event)
    assert event["error"]["code"] == "response_already_completed"


def test_a_response_created_without_multi_agent_does_not_take_injects() -> None:
    ws = session()
    start(ws, stream_id="plain")
    event = event_of(inject(ws))
    assert (event["error"]["code"], event["stream_id"]) == ("inject_not_enabled", "plain")


@pytest.mark.parametrize(
    "frame, param",
    [
        ({"input": []}, "input"),
        ({"input": "text"}, "input"),
        ({"response_id": 7}, "response_id"),
        ({"stream_id": "x"}, "stream_id"),
        ({"input": [{"type": "message", "role": "assistant", "content": "hi"}]}, "input[0]"),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]},
            "input[0]",
        ),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
    ],
)
def test_malformed_input_is_an_error_naming_the_field(frame: dict[str, Any], param: str) -> None:
    ws = session()
    start(ws, stream_id="agents", **MULTI_AGENT)
    body = {"type": "response.inject", "response_id": "resp_1", "input": [output()], **frame}
    event = event_of(ws.on_frame(json.dumps(body), NOW))
    assert (event["type"], event["status"], event["error"]["param"]) == ("error", 400, param)
    named = body["response_id"] == "resp_1"  # the response's lane, when it names one
    assert event.get("stream_id") == ("agents" if named else None)


def test_an_inject_past_the_item_bound_is_refused_before_its_items_are_read() -> None:
    items = [output(f"c{i}") for i in range(16_385)]
    with pytest.raises(ApiError) as refused:
        parse_inject({"response_id": "r", "input": items}, 10**9, 10**6)
    assert refused.value.code == "array_above_max_length"


# -- the inbox: all or nothing --------------------------------------------------------------


def inbox_of(*calls: tuple[str, str]) -> tuple[InjectInbox, list[dict[str, Any]]]:
    inbox = InjectInbox("resp_1")
    emitted: list[dict[str, Any]] = []
    events = ResponseEvents({"id": "resp_1", "output": []})
    inbox.attach(events, emitted.append)
    for call_id, kind in calls:
        inbox.expect(call_id, kind)
    return inbox, emitted


def parsed(*items: dict[str, Any]):
    return parse_inject({"response_id": "resp_1", "input": list(items)}, 10**6, 1000)


def test_the_outputs_of_every_call_make_the_inbox_ready_and_each_commit_is_announced() -> None:
    inbox, emitted = inbox_of(("call_1", "function_call"), ("call_2", "custom_tool_call"))
    woken: list[bool] = []
    inbox.on_ready = lambda: woken.append(True)
    inbox.commit(parsed(output("call_1")))
    assert not inbox.ready and not woken and inbox.awaited == 1
    note = {"type": "message", "role": "user", "content": "and then?"}
    inbox.commit(
        parsed({"type": "custom_tool_call_output", "call_id": "call_2", "output": "ok"}, note)
    )
    assert inbox.ready and woken == [True]
    for event in emitted:
        BetaResponseInjectCreatedEvent.model_validate(event)
    assert [e["sequence_number"] for e in emitted] == [0, 1]
    committed = inbox.take()
    assert [i["type"] for i in committed] == [
        "function_call_output",
        "custom_tool_call_output",
        "message",
    ]
    assert all(i["id"] and i["status"] == "completed" for i in committed)
    assert inbox.take() == []


def test_an_inject_with_one_item_that_fits_no_call_commits_none() -> None:
    inbox, emitted = inbox_of(("call_1", "function_call"), ("call_2", "function_call"))
    with pytest.raises(ApiError) as refused:
        inbox.commit(parsed(output("call_1"), output("call_9")))
    assert refused.value.param == "input[1].call_id"
    with pytest.raises(ApiError):  # the same call twice in one inject
        inbox.commit(parsed(output("call_1"), output("call_1")))
    with pytest.raises(ApiError) as wrong_kind:
        kind = {"type": "custom_tool_call_output", "call_id": "call_2", "output": "x"}
        inbox.commit(parsed(kind))
    assert wrong_kind.value.param == "input[0].type"
    assert inbox.awaited == 2 and not emitted and inbox.take() == []


def test_an_answered_call_takes_no_second_output() -> None:
    inbox, _ = inbox_of(("call_1", "function_call"))
    inbox.commit(parsed(output("call_1")))
    with pytest.raises(ApiError):
        inbox.commit(parsed(output("call_1")))


def test_once_the_response_decided_its_ending_an_inject_is_already_completed() -> None:
    inbox, emitted = inbox_of(("call_1", "function_call"))
    inbox.close()
    with pytest.raises(InjectRefused) as refused:
        inbox.commit(parsed(output("call_1")))
    assert refused.value.code == "response_already_completed"
    assert not emitted
