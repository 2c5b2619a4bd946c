"""The official clients, unmodified, against the running stack: the openai SDK
over HTTP, SSE and WebSocket, and openai-agents over its WebSocket transport."""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import pytest
from openai import OpenAI
from support.agents_loop import run_weather_agent
from support.openresponses import (
    validate_response_object,
    validate_stream_event,
    validate_ws_event,
)
from support.tools import WEATHER_TOOL, only_call, tool_result
from support.wire import TERMINAL

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def client(stack):
    with OpenAI(base_url=stack.base_url, api_key=stack.api_key, max_retries=0) as c:
        yield c


def raw_json(response) -> dict:
    return json.loads(response.http_response.content)


def test_non_streaming_create_returns_a_valid_completed_response(client):
    raw = client.responses.with_raw_response.create(model="turnpike-sim", input="Say hello.")
    body = raw_json(raw)
    validate_response_object(body)
    response = raw.parse()
    assert response.status == "completed"
    assert response.output_text.strip()
    assert response.usage.input_tokens > 0 and response.usage.output_tokens > 0
    assert raw.headers.get("x-request-id")


def test_get_returns_the_same_object_the_create_returned(client):
    created = raw_json(client.responses.with_raw_response.create(model="turnpike-sim", input="hi"))
    fetched = raw_json(client.responses.with_raw_response.retrieve(created["id"]))
    assert fetched == created


def test_stream_helper_gets_the_final_response_with_a_function_call(client):
    seen = []
    with client.responses.stream(
        model="turnpike-sim", input="What is the weather in Paris?", tools=[WEATHER_TOOL]
    ) as stream:
        for event in stream:
            seen.append(event.type)
        final = stream.get_final_response()
    assert seen[0] == "response.created" and seen[-1] == "response.completed"
    [call] = [item for item in final.output if item.type == "function_call"]
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER_TOOL["parameters"])


def test_every_sse_event_validates_against_the_open_responses_schema(stack):
    body = {
        "model": "turnpike-sim",
        "input": "Weather in Oslo?",
        "tools": [WEATHER_TOOL],
        "stream": True,
    }
    events: list[Any] = []  # each event's JSON, then "[DONE]"
    with httpx.stream(
        "POST",
        f"{stack.base_url}/responses",
        json=body,
        headers={"Authorization": f"Bearer {stack.api_key}"},
        timeout=30,
    ) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        name = None
        for line in reply.iter_lines():
            if line.startswith("event: "):
                name = line[len("event: ") :]
            elif line.startswith("data: "):
                data = line[len("data: ") :]
                if data == "[DONE]":
                    events.append("[DONE]")
                    continue
                event = json.loads(data)
                assert name == event["type"]
                events.append(event)
    assert events[-1] == "[DONE]"
    events = events[:-1]
    for event in events:
        validate_stream_event(event)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert len({e["response"]["id"] for e in events if "response" in e}) == 1
    validate_response_object(events[-1]["response"])


def test_function_call_loop_over_http_chained_and_stateless(client):
    first = client.responses.create(
        model="turnpike-sim", input="Weather in Rome?", tools=[WEATHER_TOOL]
    )
    call = next(item for item in first.output if item.type == "function_call")
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 24C"}
    chained = client.responses.create(
        model="turnpike-sim", previous_response_id=first.id, input=[output], tools=[WEATHER_TOOL]
    )
    assert chained.output[0].type == "message"
    assert "sunny" in chained.output_text
    stateless = client.responses.create(
        model="turnpike-sim",
        tools=[WEATHER_TOOL],
        input=[
            {"role": "user", "content": "Weather in Rome?"},
            call.model_dump(exclude_none=True),
            output,
        ],
    )
    assert stateless.output[0].type == "message" and "sunny" in stateless.output_text


def test_input_items_pages_with_has_more(client):
    first = client.responses.create(model="turnpike-sim", input="one")
    second = client.responses.create(
        model="turnpike-sim",
        previous_response_id=first.id,
        input=[{"role": "user", "content": "two"}, {"role": "user", "content": "three"}],
    )
    page = client.responses.input_items.list(second.id, limit=2, order="asc")
    assert page.has_more is True and len(page.data) == 2
    all_items = list(client.responses.input_items.list(second.id, limit=1, order="asc"))
    # one + the first answer + two + three
    assert len(all_items) == 4
    assert all_items[0].type == "message" and all_items[-1].content[0].text == "three"


def test_input_tokens_count_matches_usage(client):
    count = client.responses.input_tokens.count(model="turnpike-sim", input="Count me, please.")
    response = client.responses.create(model="turnpike-sim", input="Count me, please.")
    assert count.input_tokens == response.usage.input_tokens > 0


def test_models_list_the_simulators(client):
    ids = {m.id for m in client.models.list()}
    assert {"turnpike-sim", "turnpike-sim-65", "turnpike-sim-4000"} <= ids


def test_delete_removes_the_response(client):
    response = client.responses.create(model="turnpike-sim", input="bye", store=True)
    client.responses.delete(response.id)
    with pytest.raises(Exception) as err:
        client.responses.retrieve(response.id)
    assert getattr(err.value, "status_code", None) == 404


def test_websocket_multi_turn_function_call_loop_on_one_socket(client):
    events = []
    with client.responses.connect() as conn:

        def turn(**body):
            conn.response.create(model="turnpike-sim", tools=[WEATHER_TOOL], **body)
            for event in conn:
                events.append(event)
                if event.type in ("response.completed", "response.failed", "error"):
                    return event
            raise AssertionError("socket closed before the terminal event")

        done = turn(input="Weather in Paris?")
        assert done.type == "response.completed"
        previous = done.response
        for i in range(3):
            call = only_call(previous)
            done = turn(
                previous_response_id=previous.id,
                input=tool_result(
                    call.call_id, f"sunny {i}", f"And the weather in city number {i}?"
                ),
            )
            assert done.type == "response.completed", done
            previous = done.response
            texts = [item for item in previous.output if item.type == "function_call"]
            assert texts, "a new user question with tools gets a new call"
        # The follow-ups were served from the connection's cache of the chain.
        assert previous.previous_response_id is not None
    for event in events:
        validate_ws_event(event.model_dump(mode="json", exclude_unset=True))


def test_websocket_session_lanes_echo_stream_id(client):
    from openai.lib.responses_websocket import (
        ResponsesWebSocketLimits,
        ResponsesWebSocketSession,
    )

    limits = ResponsesWebSocketLimits(
        max_lanes=4,
        max_events_per_lane=4096,
        max_events=8192,
        max_bytes_per_lane=1 << 24,
        max_bytes=1 << 25,
    )
    with (
        client.responses.connect() as conn,
        ResponsesWebSocketSession(conn, limits=limits) as session,
    ):
        a, b = session.lane("alpha"), session.lane("beta")
        a.send({"type": "response.create", "model": "turnpike-sim", "input": "lane a"})
        b.send({"type": "response.create", "model": "turnpike-sim", "input": "lane b"})
        ra, rb = a.get_final_response(), b.get_final_response()
        assert ra.status == rb.status == "completed" and ra.id != rb.id
        # generate: false warms up state that a follow-up can continue
        a.send(
            {"type": "response.create", "model": "turnpike-sim", "input": "warm", "generate": False}
        )
        warm = a.get_final_response()
        assert warm.output == []
        a.send(
            {
                "type": "response.create",
                "model": "turnpike-sim",
                "input": "go",
                "previous_response_id": warm.id,
            }
        )
        assert a.get_final_response().status == "completed"


async def test_openai_agents_runs_a_tool_loop_over_websocket(stack):
    calls, result = await run_weather_agent(stack, websocket=True)
    assert calls, "the agent called the tool"
    assert "sunny" in result.final_output


def read_terminals(conn, count: int) -> list:
    """Every event until ``count`` terminal events have arrived, each validated."""
    events = []
    for event in conn:
        validate_ws_event(event.model_dump(mode="json", exclude_unset=True))
        events.append(event)
        if event.type in TERMINAL:
            count -= 1
            if count == 0:
                return events
    raise AssertionError("socket closed before the terminal events")


def test_websocket_lane_runs_creates_sent_without_waiting_in_order(client):
    """Lanes are FIFO (responses-protocol.md §6.3): the second create waits for the
    first's terminal event, then runs; neither is refused."""
    with client.responses.connect() as conn:
        for text in ("first question", "second question"):
            conn.response.create(model="turnpike-sim", input=text, stream_id="main")
        events = read_terminals(conn, 2)
    assert all(event.stream_id == "main" for event in events)
    created = [i for i, e in enumerate(events) if e.type == "response.created"]
    done = [i for i, e in enumerate(events) if e.type == "response.completed"]
    assert len(created) == len(done) == 2
    assert created[0] < done[0] < created[1] < done[1]  # no overlap on the lane
    first, second = events[done[0]].response, events[done[1]].response
    assert first.id != second.id and first.status == second.status == "completed"
    # In the order sent: the first response answers the first question.
    for response, text in ((first, "first question"), (second, "second question")):
        [item] = client.responses.input_items.list(response.id).data
        assert item.content[0].text == text


def test_websocket_queued_create_continues_the_response_queued_before_it(client):
    """A create queued behind a running response may name it as previous_response_id:
    the parent is cached (here store: false) before its terminal event leaves."""
    with client.responses.connect() as conn:
        # Seconds of generation at 65 tokens/s: the lane is busy when the follow-up arrives.
        conn.response.create(
            model="turnpike-sim-65", input="Tell me a story in 300 words", store=False
        )
        first_created = next(iter(conn))
        assert first_created.type == "response.created"
        parent = first_created.response.id
        conn.response.create(
            model="turnpike-sim",
            input="And a shorter one?",
            previous_response_id=parent,
            store=False,
        )
        events = read_terminals(conn, 2)
    first, second = [e for e in events if e.type in TERMINAL]
    assert first.type == "response.completed" and first.response.id == parent
    assert second.type == "response.completed", second
    assert second.response.previous_response_id == parent
    assert second.response.usage.input_tokens > first.response.usage.input_tokens
