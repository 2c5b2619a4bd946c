"""``/v1/conversations`` through the official SDK against the real stack: conversations
and their items (CRUD, paging), the ``conversation`` parameter of a create request over
HTTP and WebSocket (each turn's input and output appended, the next turn built on them),
its errors, and tenant isolation: another tenant's conversation is not found, whatever
the operation."""

from __future__ import annotations

import openai
import pytest
from openai import OpenAI
from support.openresponses import (
    validate_input_item,
    validate_input_items_page,
    validate_response_object,
    validate_ws_event,
)
from support.sdk import message, response_usage, text_of, user
from support.tools import READ_FILE_TOOL

pytestmark = pytest.mark.stack

MODEL = "turnpike-sim-4000"


def client_of(stack, tenant: str = "dev") -> OpenAI:
    return OpenAI(base_url=stack.base_url, api_key=stack.api_keys[tenant], max_retries=0)


def expect_error(status: int, param: str | None, call, *args, **kwargs) -> dict:
    with pytest.raises(openai.APIStatusError) as err:
        call(*args, **kwargs)
    assert err.value.status_code == status, err.value
    body = err.value.body
    assert isinstance(body, dict) and body.get("param") == param, body
    return body


def test_create_retrieve_update_delete(stack):
    client = client_of(stack)
    conversation = client.conversations.create(metadata={"topic": "demo"})
    assert conversation.id.startswith("conv_")
    assert conversation.object == "conversation"
    assert conversation.metadata == {"topic": "demo"}
    assert conversation.created_at > 0

    again = client.conversations.retrieve(conversation.id)
    assert again.model_dump() == conversation.model_dump()

    updated = client.conversations.update(conversation.id, metadata={"topic": "changed"})
    assert updated.metadata == {"topic": "changed"}
    assert client.conversations.retrieve(conversation.id).metadata == {"topic": "changed"}

    deleted = client.conversations.delete(conversation.id)
    assert (deleted.id, deleted.object, deleted.deleted) == (
        conversation.id,
        "conversation.deleted",
        True,
    )
    expect_error(404, "conversation_id", client.conversations.retrieve, conversation.id)
    expect_error(404, "conversation_id", client.conversations.delete, conversation.id)


def test_metadata_limits(stack):
    client = client_of(stack)
    expect_error(
        400,
        "metadata",
        client.conversations.create,
        metadata={f"k{i}": "v" for i in range(17)},
    )
    expect_error(400, "metadata." + "k" * 65, client.conversations.create, metadata={"k" * 65: "v"})
    expect_error(400, "metadata.k", client.conversations.create, metadata={"k": "v" * 513})
    conversation = client.conversations.create()
    assert conversation.metadata == {}
    expect_error(
        400, "metadata.k", client.conversations.update, conversation.id, metadata={"k": "v" * 513}
    )


def test_items_add_list_page_retrieve_delete(stack):
    client = client_of(stack)
    conversation = client.conversations.create(items=[user("first"), user("second")])
    added = client.conversations.items.create(
        conversation.id, items=[user(f"more {i}") for i in range(3)]
    )
    assert added.object == "list" and len(added.data) == 3
    assert added.first_id == added.data[0].id and added.last_id == added.data[-1].id

    texts = ["first", "second", "more 0", "more 1", "more 2"]
    everything = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [text_of(item) for item in everything] == texts
    assert len({item.id for item in everything}) == 5
    for item in everything:
        validate_input_item(item.model_dump(mode="json", exclude_unset=True))

    # Pages of two, newest first by default; the SDK follows the cursor.
    page = client.conversations.items.list(conversation.id, limit=2)
    assert [text_of(item) for item in page.data] == ["more 2", "more 1"]
    assert page.has_more is True
    body = page.model_dump(mode="json", exclude_unset=True)
    validate_input_items_page(body)
    # first_id is not among the SDK page's fields: only in its JSON.
    assert body["first_id"] == page.data[0].id
    assert page.last_id is not None and page.last_id == page.data[-1].id
    nxt = client.conversations.items.list(conversation.id, limit=2, after=page.last_id)
    assert [text_of(item) for item in nxt.data] == ["more 0", "second"]
    assert nxt.last_id is not None
    last = client.conversations.items.list(conversation.id, limit=2, after=nxt.last_id)
    assert [text_of(item) for item in last.data] == ["first"]
    assert last.has_more is False
    assert [i.id for i in client.conversations.items.list(conversation.id, limit=2)] == [
        i.id for i in reversed(everything)
    ]

    second = message(everything[1])
    got = client.conversations.items.retrieve(second.id, conversation_id=conversation.id)
    assert got.id == second.id and text_of(got) == "second"
    after_delete = client.conversations.items.delete(second.id, conversation_id=conversation.id)
    assert after_delete.id == conversation.id and after_delete.object == "conversation"
    expect_error(
        404,
        "item_id",
        client.conversations.items.retrieve,
        second.id,
        conversation_id=conversation.id,
    )
    remaining = [i.id for i in client.conversations.items.list(conversation.id, order="asc")]
    assert remaining == [i.id for i in everything if i.id != second.id]

    expect_error(
        400, "items", client.conversations.items.create, conversation.id, items=[user("x")] * 21
    )
    expect_error(
        400,
        "items[0].role",
        client.conversations.items.create,
        conversation.id,
        items=[{"type": "message", "role": "robot", "content": "x"}],
    )


def test_responses_in_a_conversation_append_each_turn(stack):
    client = client_of(stack)
    conversation = client.conversations.create(metadata={"kind": "chat"})
    first = client.responses.create(
        model=MODEL, conversation=conversation.id, input="Tell me about turnpikes."
    )
    assert first.status == "completed"
    assert first.conversation is not None and first.conversation.id == conversation.id
    second = client.responses.create(
        model=MODEL, conversation={"id": conversation.id}, input="And about their history?"
    )
    assert second.conversation is not None and second.conversation.id == conversation.id
    assert second.previous_response_id is None
    for response in (first, second):
        validate_response_object(response.model_dump(mode="json", exclude_unset=True))

    items = list(client.conversations.items.list(conversation.id, order="asc"))
    expected = [
        first.output[0].id,
        second.output[0].id,
    ]
    assert [item.type for item in items] == ["message"] * 4
    assert [message(item).role for item in items] == ["user", "assistant", "user", "assistant"]
    assert [items[1].id, items[3].id] == expected
    assert text_of(items[0]) == "Tell me about turnpikes."
    assert text_of(items[2]) == "And about their history?"
    assert text_of(items[1]) == first.output_text

    # The second turn was generated from the first: its prompt is the one the same two
    # turns chained by previous_response_id have.
    chain_first = client.responses.create(model=MODEL, input="Tell me about turnpikes.")
    chain_second = client.responses.create(
        model=MODEL, previous_response_id=chain_first.id, input="And about their history?"
    )
    said, answered = response_usage(first).input_tokens, response_usage(first).output_tokens
    assert response_usage(second).input_tokens == response_usage(chain_second).input_tokens
    assert response_usage(second).input_tokens > said + answered
    # Counting counts the conversation too: the items of both turns, then the new input.
    counted = client.responses.input_tokens.count(
        model=MODEL, conversation=conversation.id, input="And about their history?"
    )
    assert counted.input_tokens > response_usage(second).input_tokens

    # The stored response lists only its own input.
    own = list(client.responses.input_items.list(second.id))
    assert [text_of(item) for item in own] == ["And about their history?"]


def test_conversation_errors(stack):
    client = client_of(stack)
    conversation = client.conversations.create()
    first = client.responses.create(model=MODEL, input="hello")
    body = expect_error(
        400,
        "conversation",
        client.responses.create,
        model=MODEL,
        conversation=conversation.id,
        previous_response_id=first.id,
        input="both",
    )
    assert body["code"] == "mutually_exclusive_parameters"
    body = expect_error(
        404,
        "conversation",
        client.responses.create,
        model=MODEL,
        conversation="conv_does_not_exist",
        input="hi",
    )
    assert body["code"] == "conversation_not_found"
    expect_error(
        400,
        "conversation",
        client.responses.create,
        model=MODEL,
        input="hi",
        extra_body={"conversation": 42},
    )
    # Nothing was appended by the refused requests.
    assert list(client.conversations.items.list(conversation.id)) == []


def test_another_tenant_cannot_touch_a_conversation(stack):
    alice, bob = client_of(stack, "alice"), client_of(stack, "bob")
    conversation = alice.conversations.create(items=[user("secret")], metadata={"o": "alice"})
    item_id = next(iter(alice.conversations.items.list(conversation.id))).id
    cid = conversation.id

    expect_error(404, "conversation_id", bob.conversations.retrieve, cid)
    expect_error(404, "conversation_id", bob.conversations.update, cid, metadata={"o": "bob"})
    expect_error(404, "conversation_id", lambda: list(bob.conversations.items.list(cid)))
    expect_error(404, "conversation_id", bob.conversations.items.create, cid, items=[user("x")])
    expect_error(
        404, "conversation_id", bob.conversations.items.retrieve, item_id, conversation_id=cid
    )
    expect_error(
        404, "conversation_id", bob.conversations.items.delete, item_id, conversation_id=cid
    )
    expect_error(
        404, "conversation", bob.responses.create, model=MODEL, conversation=cid, input="leak?"
    )
    expect_error(404, "conversation_id", bob.conversations.delete, cid)

    # Alice's conversation is untouched.
    assert alice.conversations.retrieve(cid).metadata == {"o": "alice"}
    items = list(alice.conversations.items.list(cid))
    assert [item.id for item in items] == [item_id]


def test_websocket_create_in_a_conversation(stack):
    client = client_of(stack)
    conversation = client.conversations.create()
    done = []
    with client.responses.connect() as conn:
        for text in ("Hello over a socket.", "And a second turn."):
            conn.response.create(model=MODEL, conversation=conversation.id, input=text)
            for event in conn:
                validate_ws_event(event.model_dump(mode="json", exclude_unset=True))
                if event.type in ("response.completed", "response.failed", "error"):
                    assert event.type == "response.completed", event
                    done.append(event.response)
                    break
        conn.response.create(model=MODEL, conversation="conv_missing", input="x")
        for event in conn:
            if event.type in ("response.completed", "response.failed", "error"):
                missing = event
                break
    assert len(done) == 2
    assert all(r.conversation and r.conversation.id == conversation.id for r in done)
    assert missing.type == "error"
    assert missing.error.param == "conversation"
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [message(item).role for item in items] == ["user", "assistant", "user", "assistant"]
    assert text_of(items[2]) == "And a second turn."
    assert items[3].id == done[1].output[0].id
    # The second turn's prompt held the first turn.
    first, second = (response_usage(response).input_tokens for response in done)
    assert second > first


def test_a_tool_call_answered_in_the_next_turn_of_a_conversation(stack):
    client = client_of(stack)
    conversation = client.conversations.create()
    first = client.responses.create(
        model=MODEL, conversation=conversation.id, input="Open main.py", tools=[READ_FILE_TOOL]
    )
    call = first.output[0]
    assert call.type == "function_call"
    # The output answers a call only the conversation holds; not stored, still appended.
    second = client.responses.create(
        model=MODEL,
        conversation=conversation.id,
        tools=[READ_FILE_TOOL],
        store=False,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "print(1)"}],
    )
    assert second.status == "completed"
    items = list(client.conversations.items.list(conversation.id, order="asc"))
    assert [item.type for item in items] == [
        "message",
        "function_call",
        "function_call_output",
        *(item.type for item in second.output),
    ]
    # An output that answers no call of the conversation is refused.
    expect_error(
        400,
        "input[0].call_id",
        client.responses.create,
        model=MODEL,
        conversation=conversation.id,
        input=[{"type": "function_call_output", "call_id": "call_nowhere", "output": "x"}],
    )
