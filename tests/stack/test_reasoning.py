"""Reasoning through the official SDK against the real stack: ``reasoning.effort`` gives
a reasoning item before the answer with ``reasoning_tokens`` in usage, its streamed
events validate, and a summary is streamed when asked for."""

from __future__ import annotations

import json
from typing import TypedDict

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.responses import ResponseIncludable
from support.agents_loop import run_weather_agent
from support.openresponses import (
    parse_sse,
    validate_output_item,
    validate_response_object,
    validate_stream_event,
)
from support.sdk import as_input, response_usage, sent_back, user, ws_turn

pytestmark = pytest.mark.stack

MODEL = "turnpike-sim-4000"
# OpenAI's names (the SDK's event types) for the reasoning text events; the Open
# Responses catalogue has the same events, fields and all, as response.reasoning.*.
SPEC_NAMES = {
    "response.reasoning_text.delta": "response.reasoning.delta",
    "response.reasoning_text.done": "response.reasoning.done",
}


def client_of(stack, tenant: str = "alice") -> OpenAI:
    return OpenAI(base_url=stack.base_url, api_key=stack.api_keys[tenant], max_retries=0)


def validate_event(event: dict) -> None:
    validate_stream_event({**event, "type": SPEC_NAMES.get(event["type"], event["type"])})


def stream_events(stack, **body) -> list[dict]:
    reply = httpx.post(
        f"{stack.base_url}/responses",
        headers={"authorization": f"Bearer {stack.api_keys['alice']}"},
        json={"model": MODEL, "stream": True, **body},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    frames = parse_sse(reply.text)
    assert frames[-1][1] == "[DONE]"
    events = [json.loads(data) for _, data in frames[:-1]]
    for event in events:
        validate_event(event)
    return events


def test_effort_gives_a_reasoning_item_and_reasoning_tokens(stack):
    client = client_of(stack)
    raw = client.responses.with_raw_response.create(
        model=MODEL, input="Why is the sky blue?", reasoning={"effort": "medium"}
    )
    validate_response_object(raw.http_response.json())
    response = raw.parse()
    assert [item.type for item in response.output] == ["reasoning", "message"]
    reasoning = response.output[0]
    assert reasoning.type == "reasoning"
    for item in raw.http_response.json()["output"]:
        validate_output_item(item)
    assert reasoning.content and reasoning.content[0].type == "reasoning_text"
    assert reasoning.content[0].text and reasoning.summary == []
    details = response_usage(response).output_tokens_details
    assert details.reasoning_tokens > 0
    assert response_usage(response).output_tokens > details.reasoning_tokens
    assert response.reasoning is not None and response.reasoning.effort == "medium"
    plain = client.responses.create(model=MODEL, input="Why is the sky blue?")
    assert [item.type for item in plain.output] == ["message"]
    assert response_usage(plain).output_tokens_details.reasoning_tokens == 0
    assert plain.output_text == response.output_text


def test_streamed_reasoning_and_summary_events_validate(stack):
    events = stream_events(
        stack, input="Explain tides.", reasoning={"effort": "low", "summary": "detailed"}
    )
    types = [e["type"] for e in events]
    first_message = types.index("response.content_part.added")
    reasoning_types = types[:first_message]
    assert "response.reasoning_text.delta" in reasoning_types
    assert reasoning_types[-7:] == [
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.done",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",  # the message
    ]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.reasoning_text.delta")
    final = events[-1]["response"]
    assert final["output"][0]["content"] == [{"type": "reasoning_text", "text": deltas}]
    summary = final["output"][0]["summary"]
    assert summary[0]["type"] == "summary_text" and summary[0]["text"].startswith("**")
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] > 0


def test_the_sdk_stream_has_typed_reasoning_events(stack):
    client = client_of(stack)
    with client.responses.stream(
        model=MODEL, input="Plan a trip.", reasoning={"effort": "high", "summary": "auto"}
    ) as stream:
        kinds = {type(event).__name__ for event in stream}
        final = stream.get_final_response()
    assert "ResponseReasoningTextDeltaEvent" in kinds
    assert "ResponseReasoningSummaryTextDeltaEvent" in kinds
    assert final.output[0].type == "reasoning" and final.output[0].summary


def test_an_unknown_effort_is_refused(stack):
    with pytest.raises(openai.BadRequestError) as err:
        # As extra_body: the SDK's types allow only the efforts there are.
        client_of(stack).responses.create(
            model=MODEL, input="hi", extra_body={"reasoning": {"effort": "extreme"}}
        )
    assert err.value.param == "reasoning.effort"


class Stateless(TypedDict):
    store: bool
    include: list[ResponseIncludable]


STATELESS: Stateless = {"store": False, "include": ["reasoning.encrypted_content"]}


def test_stateless_chaining_with_encrypted_reasoning(stack):
    client = client_of(stack)
    first_input = [user("Which planets have rings?")]
    first = client.responses.create(
        model=MODEL, input=first_input, reasoning={"effort": "low"}, **STATELESS
    )
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content
    assert reasoning.content and reasoning.content[0].text not in reasoning.encrypted_content
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)
    history = as_input([*first_input, *sent_back(first.output), user("And which is the largest?")])
    second = client.responses.create(
        model=MODEL, input=history, reasoning={"effort": "low"}, **STATELESS
    )
    assert second.status == "completed"
    assert [item.type for item in second.output] == ["reasoning", "message"]
    assert response_usage(second).input_tokens > response_usage(first).input_tokens


def test_encrypted_reasoning_renders_as_the_chained_turn(stack):
    client = client_of(stack)
    first_input = [user("Name three rivers.")]
    first = client.responses.create(
        model=MODEL,
        input=first_input,
        reasoning={"effort": "medium"},
        include=["reasoning.encrypted_content"],
    )
    follow_up = user("Which is the longest?")
    chained = client.responses.input_tokens.count(
        model=MODEL, previous_response_id=first.id, input=[follow_up]
    )
    stateless = client.responses.input_tokens.count(
        model=MODEL, input=as_input([*first_input, *sent_back(first.output), follow_up])
    )
    assert stateless.input_tokens == chained.input_tokens


def test_changed_or_foreign_encrypted_reasoning_is_refused(stack):
    alice = client_of(stack, "alice")
    first_input = [user("Count to three.")]
    first = alice.responses.create(
        model=MODEL, input=first_input, reasoning={"effort": "low"}, **STATELESS
    )
    items = sent_back(first.output)
    blob = items[0]["encrypted_content"]
    changed = {
        **items[0],
        "encrypted_content": blob[:-4] + ("AAAA" if blob[-4:] != "AAAA" else "BBBB"),
    }
    for client, item in ((alice, changed), (client_of(stack, "bob"), items[0])):
        with pytest.raises(openai.BadRequestError) as err:
            client.responses.create(
                model=MODEL, input=as_input([*first_input, item, user("Again.")]), **STATELESS
            )
        body = err.value.body
        assert err.value.param == "input[1].encrypted_content", body
        assert err.value.code == "invalid_encrypted_content", body


def test_an_unknown_include_is_refused(stack):
    with pytest.raises(openai.BadRequestError) as err:
        # As extra_body: the SDK's types allow only the values there are.
        client_of(stack).responses.create(
            model=MODEL, input="hi", extra_body={"include": ["everything"]}
        )
    assert err.value.param == "include[0]"


@pytest.mark.parametrize("websocket", [False, True])
async def test_openai_agents_runs_a_stateless_tool_loop_with_reasoning(stack, websocket):
    """The Codex-style loop: store=False, every turn re-sends the whole history (no
    previous_response_id), the reasoning item sent back sealed, over HTTP and WebSocket."""
    from agents import ModelSettings
    from openai.types.shared import Reasoning

    settings = ModelSettings(
        store=False,
        reasoning=Reasoning(effort="low"),
        response_include=["reasoning.encrypted_content"],
    )
    sent: list[dict] = []
    calls, result = await run_weather_agent(
        stack, websocket=websocket, model_settings=settings, sent=sent
    )
    assert calls, "the agent called the tool"
    assert "sunny" in result.final_output
    reasoning = [i for r in result.raw_responses for i in r.output if i.type == "reasoning"]
    assert len(reasoning) == 2  # one a turn
    assert all(r.usage.output_tokens_details.reasoning_tokens > 0 for r in result.raw_responses)
    # What went over the wire: two stateless turns, the second carrying the first's
    # reasoning item, sealed, before its call and the call's output.
    assert len(sent) == 2
    for body in sent:
        assert body["store"] is False and "previous_response_id" not in body
        assert "reasoning.encrypted_content" in body["include"]
    kinds = [item.get("type", "message") for item in sent[1]["input"]]
    assert kinds == ["message", "reasoning", "function_call", "function_call_output"]
    assert sent[1]["input"][1]["encrypted_content"] == reasoning[0].encrypted_content
    # Never stored: not retrievable afterwards.
    for response in result.raw_responses:
        with pytest.raises(openai.NotFoundError):
            client_of(stack, "dev").responses.retrieve(response.response_id)


def test_encrypted_reasoning_over_websocket(stack):
    alice, bob = client_of(stack, "alice"), client_of(stack, "bob")
    first_input = [user("Describe a volcano.")]
    bobs = bob.responses.create(
        model=MODEL, input=first_input, reasoning={"effort": "low"}, **STATELESS
    )
    with alice.responses.connect() as conn:
        first = ws_turn(
            conn, model=MODEL, input=first_input, reasoning={"effort": "low"}, **STATELESS
        )
        assert first.type == "response.completed"
        items = sent_back(first.response.output)
        assert items[0]["encrypted_content"]
        again = [*first_input, *items, user("And a glacier?")]
        done = ws_turn(conn, model=MODEL, input=again, **STATELESS)
        foreign = [*first_input, *sent_back(bobs.output), user("And a glacier?")]
        refused = ws_turn(conn, model=MODEL, input=foreign, **STATELESS)
    assert done.type == "response.completed"
    assert refused.type == "error"
    assert refused.error.param == "input[1].encrypted_content"
