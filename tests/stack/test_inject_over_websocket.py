"""``response.inject`` end to end (issue 22, beta), sent by the official SDK
(``client.beta.responses.connect()``, ``connection.response.inject``) to the running
stack: a ``multi_agent`` response is the whole agent loop, waiting on each call for its
output; it is billed once with the usage of every step, and continues like any response.
The rules one by one are in ``tests/unit/gateway/test_websocket_injection.py``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI
from openai.types.beta import BetaResponseInjectCreatedEvent
from support.gateway_process import own_gateway
from support.raw_calls import until_terminal
from support.usage_totals import billed_after, usage_totals
from websockets.sync.client import connect as ws_connect

from turnpike.devstack import StackEndpoints

pytestmark = pytest.mark.stack

BETA = {"OpenAI-Beta": "responses_multi_agent=v1"}
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
ENDS = ("response.completed", "response.incomplete", "response.failed", "error")
# The simulator calls the tool a user message asks for, and answers a tool output alone.
ASK = "What is the weather in Paris? Use get_weather."
AGAIN = "Now get the weather for Rome with get_weather."


@pytest.fixture(scope="module")
def client(stack: StackEndpoints) -> Iterator[OpenAI]:
    with OpenAI(base_url=stack.base_url, api_key=stack.api_keys["alice"], max_retries=0) as c:
        yield c


def output_of(call_id: str, text: str) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": text}


def test_a_multi_agent_response_is_the_whole_loop_and_is_billed_once(
    stack: StackEndpoints, client: OpenAI
) -> None:
    """Two calls, each answered by an inject, then the answer: one response, its output
    the calls, the committed items and the answer; its usage the sum of the steps', billed
    as one record. The next turn continues it with a plain create."""
    before = usage_totals(stack, "alice")
    seen: list[Any] = []
    injects = 0
    with client.beta.responses.connect(extra_headers=BETA) as conn:
        conn.response.create(
            model="turnpike-sim",
            input=ASK,
            tools=[TOOL],  # type: ignore[list-item]
            multi_agent={"enabled": True},
        )
        for event in conn:
            seen.append(event)
            if event.type == "response.output_item.done" and event.item.type == "function_call":
                injects += 1
                answer = [output_of(event.item.call_id, f"sunny, {20 + injects} C")]
                if injects == 1:
                    answer.append({"type": "message", "role": "user", "content": AGAIN})
                conn.response.inject(response_id=seen[0].response.id, input=answer)  # type: ignore[arg-type]
            if event.type in ENDS:
                break
        final = seen[-1].response
        assert seen[-1].type == "response.completed", seen[-1]
        conn.response.create(
            model="turnpike-sim",
            input="thanks, and tomorrow?",
            tools=[TOOL],  # type: ignore[list-item]
            previous_response_id=final.id,
        )
        follow = next(e for e in conn if e.type in ENDS)
    assert [e.type for e in seen].count("response.created") == 1
    created = [e for e in seen if e.type == "response.inject.created"]
    assert len(created) == injects == 2
    for event in created:
        BetaResponseInjectCreatedEvent.model_validate(event.model_dump())
    assert [item.type for item in final.output] == [
        "function_call",
        "function_call_output",
        "message",  # the user's, committed with the first output
        "function_call",
        "function_call_output",
        "message",  # the model's answer
    ]
    numbers = [e.sequence_number for e in seen]
    assert numbers == list(range(len(numbers)))  # the inject events numbered in the stream
    steps = (final.model_extra or {})["turnpike"]["steps"]
    assert len(steps) == 3
    usage = final.usage
    assert usage is not None
    assert usage.input_tokens == sum(s["input_tokens"] for s in steps)
    assert usage.output_tokens == sum(s["output_tokens"] for s in steps)
    assert follow.type == "response.completed"
    assert follow.response.previous_response_id == final.id
    follow_usage = follow.response.usage
    assert follow_usage is not None
    # The follow-up's prompt holds the whole rollout: more than the last step's.
    assert follow_usage.input_tokens > steps[-1]["input_tokens"]
    after = billed_after(stack, "alice", before, 2)
    assert after["responses"] - before["responses"] == 2
    billed = usage.output_tokens + follow_usage.output_tokens
    assert after["output_tokens"] - before["output_tokens"] == billed


def test_without_the_beta_multi_agent_is_refused_before_any_work(stack: StackEndpoints) -> None:
    with ws_connect(
        stack.ws_url, additional_headers={"Authorization": f"Bearer {stack.api_key}"}
    ) as sock:
        body = {"type": "response.create", "input": ASK, "multi_agent": {"enabled": True}}
        sock.send(json.dumps(body))
        [event] = until_terminal(sock)
    assert event["type"] == "error"
    assert (event["error"]["code"], event["error"]["param"]) == (
        "unsupported_parameter",
        "multi_agent",
    )


@pytest.fixture(scope="module")
def impatient(stack: StackEndpoints, tmp_path_factory) -> Iterator[str]:
    yield from own_gateway(stack, tmp_path_factory, "inject-wait", TURNPIKE_WS_INJECT_WAIT_S="1")


def test_a_rollout_that_waits_too_long_completes_and_continues_as_any_response(
    impatient: str, stack: StackEndpoints
) -> None:
    """Past the wait, the response completes with its call unanswered (what a client that
    never injects expects), and a create with the output continues it; an inject then is
    response_already_completed, its input returned."""
    headers = {"Authorization": f"Bearer {stack.api_key}", **BETA}
    with ws_connect(impatient, additional_headers=headers) as sock:
        body = {
            "type": "response.create",
            "input": ASK,
            "tools": [TOOL],
            "multi_agent": {"enabled": True},
        }
        sock.send(json.dumps(body))
        events = until_terminal(sock)
        final = events[-1]["response"]
        assert events[-1]["type"] == "response.completed", events[-1]
        [call] = [i for i in final["output"] if i["type"] == "function_call"]
        late = [output_of(call["call_id"], "sunny")]
        sock.send(
            json.dumps({"type": "response.inject", "response_id": final["id"], "input": late})
        )
        refused = json.loads(sock.recv(timeout=10))
        assert refused["type"] == "response.inject.failed"
        assert refused["error"]["code"] == "response_already_completed"
        assert refused["input"] == late
        sock.send(
            json.dumps(
                {
                    "type": "response.create",
                    "input": late,
                    "tools": [TOOL],
                    "previous_response_id": final["id"],
                }
            )
        )
        assert until_terminal(sock)[-1]["type"] == "response.completed"
