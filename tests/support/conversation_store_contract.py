"""What every ``ConversationStore`` does, whatever keeps it: run against the in-memory
store (tests/test_conversation_store.py) and against Redis (tests/containers)."""

from __future__ import annotations

import uuid

from gateway.conversation_store import ConversationStore, new_conversation


def message(text: str) -> dict:
    return {
        "id": f"msg_{uuid.uuid4().hex}",
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": text}],
        "status": "completed",
    }


async def check_conversation_store(store: ConversationStore, alice: str, bob: str) -> None:
    conversation = new_conversation({"topic": "tests"})
    first = [message("one"), message("two")]
    await store.create(alice, conversation, first)
    cid = conversation.id

    found = await store.get(alice, cid)
    assert found is not None
    assert found.to_json() == {
        "id": cid,
        "object": "conversation",
        "created_at": conversation.created_at,
        "metadata": {"topic": "tests"},
    }
    assert await store.items(alice, cid) == first

    # Another tenant finds nothing, changes nothing.
    assert await store.get(bob, cid) is None
    assert await store.items(bob, cid) is None
    assert await store.append(bob, cid, [message("intruder")]) is False
    assert await store.update(bob, cid, {"x": "y"}) is None
    assert await store.delete_item(bob, cid, first[0]["id"]) is None
    assert await store.delete(bob, cid) is False

    third = message("three")
    assert await store.append(alice, cid, [third]) is True
    assert [i["id"] for i in await store.items(alice, cid) or []] == [
        first[0]["id"],
        first[1]["id"],
        third["id"],
    ]

    updated = await store.update(alice, cid, {"topic": "changed"})
    assert updated is not None and updated.metadata == {"topic": "changed"}
    assert (await store.get(alice, cid)).metadata == {"topic": "changed"}  # type: ignore[union-attr]

    assert await store.delete_item(alice, cid, first[1]["id"]) is True
    assert await store.delete_item(alice, cid, first[1]["id"]) is False
    assert [i["id"] for i in await store.items(alice, cid) or []] == [first[0]["id"], third["id"]]

    assert await store.delete(alice, cid) is True
    assert await store.get(alice, cid) is None
    assert await store.items(alice, cid) is None
    # A deleted conversation never grows back.
    assert await store.append(alice, cid, [message("late")]) is False
    assert await store.items(alice, cid) is None
    assert await store.delete(alice, cid) is False
