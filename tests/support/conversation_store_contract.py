"""What every ``ConversationStore`` does, whatever keeps it: run against the in-memory
store (tests/unit/gateway/test_conversation_store.py) and against Redis (tests/containers).
Its bounds (``check_conversation_bounds``) too, appends racing included."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from turnpike.gateway.state.conversation_bounds import (
    ConversationBounds,
    ConversationTooLarge,
    item_bytes,
)
from turnpike.gateway.state.conversations import ConversationStore, new_conversation


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
    stored = await store.get(alice, cid)
    assert stored is not None and stored.metadata == {"topic": "changed"}

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


# The bounds a store under ``check_conversation_bounds`` is built with.
CONTRACT_BOUNDS = ConversationBounds(max_items=6, max_bytes=4_000)


def _refused(err: pytest.ExceptionInfo[ConversationTooLarge], items: int, size: int) -> None:
    assert (err.value.items, err.value.size) == (items, size)


async def check_conversation_bounds(store: ConversationStore, tenant: str) -> None:
    """A store built with ``CONTRACT_BOUNDS``: what would take a conversation past them is
    refused whole, also when appends race, not counting the items an append exempts (a
    turn's output); deleting an item gives its room back."""
    assert store.bounds == CONTRACT_BOUNDS
    small = [message(str(i)) for i in range(7)]  # 7 items: one too many
    size = sum(item_bytes(item) for item in small)
    too_many = new_conversation({})
    with pytest.raises(ConversationTooLarge) as err:
        await store.create(tenant, too_many, small)
    _refused(err, 7, size)
    assert await store.get(tenant, too_many.id) is None

    conversation = new_conversation({})
    await store.create(tenant, conversation, small[:2])
    cid = conversation.id
    assert await store.append(tenant, cid, small[2:6]) is True
    with pytest.raises(ConversationTooLarge) as err:
        await store.append(tenant, cid, small[6:])
    _refused(err, 7, size)
    assert [i["id"] for i in await store.items(tenant, cid) or []] == [i["id"] for i in small[:6]]
    # Deleting an item makes room for one.
    assert await store.delete_item(tenant, cid, small[0]["id"]) is True
    assert await store.append(tenant, cid, small[6:]) is True
    # A turn's output goes in past the bounds; its input must fit them.
    turn = [message("input"), message("output")]
    with pytest.raises(ConversationTooLarge):
        await store.append(tenant, cid, turn, exempt=1)
    assert await store.delete_item(tenant, cid, small[1]["id"]) is True
    assert await store.append(tenant, cid, turn, exempt=1) is True
    assert len(await store.items(tenant, cid) or []) == 7
    with pytest.raises(ConversationTooLarge):
        await store.append(tenant, cid, [message("x")])

    # Bytes: the items' JSON as stored.
    big = [message("b" * 1_000) for _ in range(4)]
    one = item_bytes(big[0])
    assert 3 * one <= CONTRACT_BOUNDS.max_bytes < 4 * one
    heavy = new_conversation({})
    await store.create(tenant, heavy, big[:2])
    with pytest.raises(ConversationTooLarge) as err:
        await store.append(tenant, heavy.id, big[2:])
    _refused(err, 4, 4 * one)
    assert len(await store.items(tenant, heavy.id) or []) == 2
    assert await store.append(tenant, heavy.id, big[2:3]) is True
    assert await store.delete_item(tenant, heavy.id, big[0]["id"]) is True
    assert await store.append(tenant, heavy.id, big[3:]) is True
    with pytest.raises(ConversationTooLarge):
        await store.create(tenant, new_conversation({}), big)

    # Appends that race: exactly as many as there is room for get in.
    racing = new_conversation({})
    await store.create(tenant, racing, small[:2])
    outcomes = await asyncio.gather(
        *(store.append(tenant, racing.id, [message(f"r{i}")]) for i in range(10)),
        return_exceptions=True,
    )
    assert outcomes.count(True) == 4
    assert all(isinstance(o, ConversationTooLarge) for o in outcomes if o is not True)
    assert len(await store.items(tenant, racing.id) or []) == CONTRACT_BOUNDS.max_items

    # A missing conversation is not found, whatever the bounds.
    assert await store.append(tenant, "conv_missing", big) is False
