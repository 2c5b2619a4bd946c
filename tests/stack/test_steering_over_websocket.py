"""``response.steer`` end to end (issue 22), sent by the official SDK
(``connection.response.steer``) to the running stack: the steered response ends at its
next item boundary, a successor continues it, a response waiting on tools keeps the
steer pending, and each response is billed on its own. The rules one by one are in
``tests/unit/gateway/test_websocket_steering.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI
from openai.resources.responses.responses import ResponsesConnection
from openai.types.responses import ResponseCreatedEvent, ResponseSteerPendingEvent
from support.sdk import text_of
from support.tools import WEATHER_TOOL, only_call
from support.usage_totals import billed_after, usage_totals

from turnpike.devstack import StackEndpoints

pytestmark = pytest.mark.stack

SLOW = "turnpike-sim-65"  # 65 tokens/s: a steer arrives long before an item ends
ENDS = ("response.completed", "response.incomplete", "response.failed", "error")


@pytest.fixture(scope="module")
def client(stack: StackEndpoints) -> Iterator[OpenAI]:
    with OpenAI(base_url=stack.base_url, api_key=stack.api_keys["alice"], max_retries=0) as c:
        yield c


def events_until(conn: ResponsesConnection, done: int) -> list[Any]:
    """Events until ``done`` responses have ended (an ``error`` counts as an end)."""
    seen = []
    for event in conn:
        seen.append(event)
        done -= event.type in ENDS
        if done == 0:
            return seen
    raise AssertionError(f"the socket closed before the end: {[e.type for e in seen]}")


def of_type(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


def test_a_steer_ends_the_response_at_its_next_item_and_a_successor_continues(
    stack: StackEndpoints, client: OpenAI
) -> None:
    before = usage_totals(stack, "alice")
    with client.responses.connect() as conn:
        # Long reasoning (xhigh: 256 tokens, 4 s here) before a long answer.
        conn.response.create(
            model=SLOW,
            input="Explain tides in 300 words",
            reasoning={"effort": "xhigh"},
            instructions="Answer plainly.",
        )
        first = []
        for event in conn:
            first.append(event)
            if event.type == "response.reasoning_text.delta":
                break  # the reasoning item is under way
        assert isinstance(first[0], ResponseCreatedEvent)
        steered_id = first[0].response.id
        conn.response.steer(previous_response_id=steered_id, input="Talk about waves instead.")
        events = first + events_until(conn, done=2)

    [accepted] = of_type(events, "response.steer.accepted")
    assert accepted.steer.previous_response_id == steered_id
    assert accepted.steer.id.startswith("steer_")
    # In the steered response's own stream, numbered in sequence with its events.
    position = events.index(accepted)
    assert accepted.sequence_number == events[position - 1].sequence_number + 1

    [steered_end, successor_end] = [e for e in events if e.type in ENDS]
    steered = steered_end.response
    assert steered_end.type == "response.incomplete", steered_end
    assert steered.incomplete_details.reason == "steered"
    # It finished the item it was in (the reasoning) and started no other.
    assert [item.type for item in steered.output] == ["reasoning"]
    assert steered.output[0].status == "completed"

    # A response.created the client never asked for: it continues the steered one,
    # with its settings and the steer as its input.
    created = of_type(events, "response.created")
    assert len(created) == 2
    successor = successor_end.response
    assert successor_end.type == "response.completed", successor_end
    assert successor.id == created[1].response.id != steered_id
    assert successor.previous_response_id == steered_id
    assert successor.instructions == "Answer plainly." and successor.model == SLOW
    assert [item.type for item in successor.output] == ["reasoning", "message"]
    # Its context: the steered turn (the question, the reasoning), then the steer.
    inputs = client.responses.input_items.list(successor.id, order="asc").data
    assert [item.type for item in inputs] == ["message", "reasoning", "message"]
    assert text_of(inputs[-1]) == "Talk about waves instead."

    # Each response billed on its own: what it generated.
    after = billed_after(stack, "alice", before, 2)
    assert after["responses"] - before["responses"] == 2
    output = [r.usage.output_tokens for r in (steered, successor) if r.usage]
    assert after["output_tokens"] - before["output_tokens"] == sum(output)
    assert 0 < output[0] <= 256 + 20  # the reasoning, not the answer after it


def test_a_response_waiting_on_tools_keeps_the_steer_for_the_clients_next_create(
    client: OpenAI,
) -> None:
    with client.responses.connect() as conn:
        conn.response.create(model=SLOW, input="Weather in Paris?", tools=[WEATHER_TOOL])
        created = next(iter(conn))
        assert created.type == "response.created"
        conn.response.steer(previous_response_id=created.response.id, input="Use Celsius.")
        events = events_until(conn, done=1)
        # The call is the client's to answer: the response completes, the steer waits.
        [end] = [e for e in events if e.type in ENDS]
        assert end.type == "response.completed"
        call = only_call(end.response)
        pending = next(e for e in conn if isinstance(e, ResponseSteerPendingEvent))
        assert pending.reason == "waiting_for_required_input"
        [stub] = [s.model_dump(exclude_none=True) for s in pending.required_input]
        assert stub == {"type": "function_call_output", "call_id": call.call_id, "name": call.name}

        conn.response.create(
            model=SLOW,
            previous_response_id=end.response.id,
            input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18C"}],
            tools=[WEATHER_TOOL],
        )
        [after] = [e for e in events_until(conn, done=1) if e.type in ENDS]
    assert after.type == "response.completed", after
    inputs = client.responses.input_items.list(after.response.id, order="asc").data
    # After the first turn (question, call), the steer first, in front of the tool's result.
    assert [item.type for item in inputs] == [
        "message",
        "function_call",
        "message",
        "function_call_output",
    ]
    assert text_of(inputs[2]) == "Use Celsius."


def test_a_steer_for_a_response_of_another_connection_is_response_not_found(
    client: OpenAI,
) -> None:
    with client.responses.connect() as one, client.responses.connect() as other:
        one.response.create(model=SLOW, input="Explain tides in 200 words")
        running = next(iter(one))
        assert isinstance(running, ResponseCreatedEvent)
        other.response.steer(previous_response_id=running.response.id, input="hello?")
        failed = next(iter(other))
        assert failed.type == "response.steer.failed"
        assert failed.error.code == "response_not_found"
        assert failed.steer.input == "hello?" and failed.steer.id is None
        # The running response was not touched by it.
        [end] = [e for e in events_until(one, done=1) if e.type in ENDS]
        assert end.type == "response.completed"
