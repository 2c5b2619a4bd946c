"""``POST /v1/responses/compact`` and ``compaction`` input items through the official SDK
against the real stack: a long chained conversation compacted, the compacted list sent
back renders to exactly the tokens of the whole history, and a changed, malformed or
another tenant's compaction item is refused with the parameter named."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from support.openresponses import (
    validate_compacted_response,
    validate_response_object,
    validate_sse_body,
)
from support.sdk import as_input, response_usage, sent_back, user, ws_turn

pytestmark = pytest.mark.stack

MODEL = "turnpike-sim-4000"
INSTRUCTIONS = "Answer briefly."


def client_of(stack, tenant: str) -> OpenAI:
    return OpenAI(base_url=stack.base_url, api_key=stack.api_keys[tenant], max_retries=0)


def chain(client: OpenAI, turns: int) -> str:
    """A conversation of ``turns`` chained responses; the last one's id."""
    previous = None
    for i in range(turns):
        response = client.responses.create(
            model=MODEL,
            instructions=INSTRUCTIONS,
            input=[user(f"Turn {i}: tell me about the number {i * 7}.")],
            previous_response_id=previous,
            max_output_tokens=40,
        )
        previous = response.id
    assert previous is not None
    return previous


def compacted_input(client: OpenAI, last: str) -> tuple[list[dict[str, Any]], int]:
    raw = client.responses.with_raw_response.compact(
        model=MODEL, instructions=INSTRUCTIONS, previous_response_id=last
    )
    validate_compacted_response(raw.http_response.json())
    compacted = raw.parse()
    assert compacted.object == "response.compaction"
    assert compacted.created_at > 0
    return sent_back(compacted.output), compacted.usage.input_tokens


def expect_400(param: str, call, **kwargs) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        call(**kwargs)
    body = err.value.body
    assert isinstance(body, dict) and body.get("param") == param, body
    assert body.get("code") == "invalid_encrypted_content", body


def test_compacted_history_renders_as_the_whole_history(stack):
    client = client_of(stack, "alice")
    last = chain(client, 5)
    items, compact_tokens = compacted_input(client, last)
    # Exactly one compaction item, sealing the whole history.
    assert [item["type"] for item in items] == ["compaction"]
    assert set(items[0]) == {"id", "type", "encrypted_content"}
    assert items[0]["encrypted_content"].startswith("tp1.")
    assert "Turn 0" not in items[0]["encrypted_content"]
    whole = client.responses.input_tokens.count(
        model=MODEL, instructions=INSTRUCTIONS, previous_response_id=last, input=[user("x")]
    )
    assert compact_tokens > 0

    # Through the tokenizer: the compacted list counts as the whole history does.
    counted = client.responses.input_tokens.count(
        model=MODEL, instructions=INSTRUCTIONS, input=as_input([*items, user("x")])
    )
    assert counted.input_tokens == whole.input_tokens

    follow_up = user("Now sum them up.")
    chained = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, previous_response_id=last, input=[follow_up]
    )
    compacted = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, input=as_input([*items, follow_up])
    )
    assert compacted.status == "completed"
    assert compacted.usage is not None and chained.usage is not None
    assert compacted.usage.input_tokens == chained.usage.input_tokens
    # Sent again, the compacted list renders the same (the render cache keys by content).
    again = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, input=as_input([*items, follow_up])
    )
    assert again.usage is not None and again.usage.input_tokens == chained.usage.input_tokens

    # A compacted list can be compacted again: it stays one compaction item.
    recompacted = client.responses.compact(
        model=MODEL, instructions=INSTRUCTIONS, input=as_input([*items, follow_up])
    )
    assert [item.type for item in recompacted.output] == ["compaction"]
    recount = client.responses.input_tokens.count(
        model=MODEL, instructions=INSTRUCTIONS, input=as_input([*items, follow_up])
    )
    assert recompacted.usage.input_tokens == recount.input_tokens


def test_a_short_history_is_one_compaction_item_too(stack):
    client = client_of(stack, "alice")
    compacted = client.responses.compact(model=MODEL, input=[user("Hello")])
    assert [item.type for item in compacted.output] == ["compaction"]
    follow_up = user("Go on.")
    counted = client.responses.input_tokens.count(
        model=MODEL, input=as_input([compacted.output[0].model_dump(exclude_none=True), follow_up])
    )
    whole = client.responses.input_tokens.count(model=MODEL, input=[user("Hello"), follow_up])
    assert counted.input_tokens == whole.input_tokens


def test_changed_or_foreign_compaction_items_are_refused(stack):
    alice, bob = client_of(stack, "alice"), client_of(stack, "bob")
    items, _ = compacted_input(bob, chain(bob, 3))
    blob = items[0]["encrypted_content"]
    create = {"model": MODEL, "instructions": INSTRUCTIONS}

    # Bob's compaction item is his alone.
    expect_400(
        "input[1].encrypted_content", alice.responses.create, **create, input=[user("hi"), *items]
    )
    expect_400("input[0].encrypted_content", alice.responses.compact, model=MODEL, input=items)
    # One character changed, or cut short, or not ours at all.
    i = len(blob) // 2
    tampered = blob[:i] + ("A" if blob[i] != "A" else "B") + blob[i + 1 :]
    for bad in (tampered, blob[:30], "opaque", ""):
        changed = [{**items[0], "encrypted_content": bad}, *items[1:]]
        expect_400("input[0].encrypted_content", bob.responses.create, **create, input=changed)
    # Bob himself still gets his answer.
    response = bob.responses.create(model=MODEL, instructions=INSTRUCTIONS, input=as_input(items))
    assert response.status == "completed"


def test_context_management_compacts_past_the_threshold(stack):
    client = client_of(stack, "alice")
    last = chain(client, 3)
    follow_up = user("And the next one?")
    # Under the threshold: nothing happens.
    under = client.responses.create(
        model=MODEL,
        instructions=INSTRUCTIONS,
        previous_response_id=last,
        input=[follow_up],
        context_management=[{"type": "compaction", "compact_threshold": 100_000}],
    )
    assert [item.type for item in under.output] == ["message"]

    raw = client.responses.with_raw_response.create(
        model=MODEL,
        instructions=INSTRUCTIONS,
        previous_response_id=last,
        input=[follow_up],
        context_management=[{"type": "compaction", "compact_threshold": 50}],
    )
    validate_response_object(raw.http_response.json())
    over = raw.parse()
    assert over.status == "completed"
    assert [item.type for item in over.output] == ["compaction", "message"]
    assert response_usage(over).input_tokens == response_usage(under).input_tokens

    # Stateless, the client sends the compaction item and what follows it instead of
    # the history (or everything: what the compaction item replaced is dropped).
    output = sent_back(over.output)
    next_turn = user("Thanks.")
    chained = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, previous_response_id=over.id, input=[next_turn]
    )
    stateless = client.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, input=as_input([*output, next_turn])
    )
    assert response_usage(stateless).input_tokens == response_usage(chained).input_tokens
    everything = client.responses.input_items.list(over.id, order="asc", limit=100).data
    full = client.responses.input_tokens.count(
        model=MODEL,
        instructions=INSTRUCTIONS,
        input=as_input([*sent_back(everything), *output, next_turn]),
    )
    assert full.input_tokens == response_usage(chained).input_tokens


def test_context_management_is_checked(stack):
    client = client_of(stack, "alice")
    with pytest.raises(openai.BadRequestError) as err:
        client.responses.create(
            model=MODEL,
            input="hi",
            context_management=[{"type": "compaction", "compact_threshold": 0}],
        )
    assert err.value.param == "context_management[0].compact_threshold"


def test_context_management_streams_the_compaction_item_first(stack):
    reply = httpx.post(
        f"{stack.base_url}/responses",
        headers={"authorization": f"Bearer {stack.api_keys['alice']}"},
        json={
            "model": MODEL,
            "input": "Tell me a story about compaction.",
            "context_management": [{"type": "compaction", "compact_threshold": 1}],
            "stream": True,
        },
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    events = validate_sse_body(reply.text, require_done=True)
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [(e["output_index"], e["item"]["type"]) for e in added] == [
        (0, "compaction"),
        (1, "message"),
    ]
    final = events[-1]
    assert final["type"] == "response.completed"
    assert [item["type"] for item in final["response"]["output"]] == ["compaction", "message"]


def test_compaction_items_over_websocket(stack):
    alice, bob = client_of(stack, "alice"), client_of(stack, "bob")
    last = chain(alice, 4)
    items, _ = compacted_input(alice, last)
    bobs, _ = compacted_input(bob, chain(bob, 3))
    follow_up = user("One more.")
    chained = alice.responses.create(
        model=MODEL, instructions=INSTRUCTIONS, previous_response_id=last, input=[follow_up]
    )
    with alice.responses.connect() as conn:
        done = ws_turn(
            conn, model=MODEL, instructions=INSTRUCTIONS, input=as_input([*items, follow_up])
        )
        refused = ws_turn(conn, model=MODEL, input=[*bobs, follow_up])
    assert done.type == "response.completed"
    assert response_usage(done.response).input_tokens == response_usage(chained).input_tokens
    assert refused.type == "error"
    assert refused.error.param == "input[0].encrypted_content"
