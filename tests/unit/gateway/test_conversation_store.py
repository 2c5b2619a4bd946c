"""The in-memory conversation store: the store contract, tenant scoping, each
conversation's bounds (items and bytes), and the store's own (conversations, and the
items they hold together; least recently used out first)."""

from __future__ import annotations

from support.conversation_store_contract import (
    CONTRACT_BOUNDS,
    check_conversation_bounds,
    check_conversation_store,
    message,
)

from turnpike.gateway.state.conversations import InMemoryConversationStore, new_conversation


async def test_the_memory_store_keeps_the_contract() -> None:
    await check_conversation_store(InMemoryConversationStore(10), "alice", "bob")


async def test_the_memory_store_keeps_each_conversation_within_its_bounds() -> None:
    await check_conversation_bounds(InMemoryConversationStore(10, bounds=CONTRACT_BOUNDS), "t")


async def test_items_are_copies() -> None:
    store = InMemoryConversationStore(10)
    conversation = new_conversation({})
    item = message("hi")
    await store.create("t", conversation, [item])
    item["status"] = "changed"
    listed = await store.items("t", conversation.id)
    assert listed is not None and listed[0]["status"] == "completed"
    listed.append(message("not stored"))
    assert len(await store.items("t", conversation.id) or []) == 1


async def test_the_least_recently_used_conversation_leaves_first() -> None:
    store = InMemoryConversationStore(2)
    a, b, c = (new_conversation({}) for _ in range(3))
    await store.create("t", a, [])
    await store.create("t", b, [])
    await store.get("t", a.id)  # a is used: b is now the oldest
    await store.create("t", c, [])
    assert await store.get("t", b.id) is None
    assert await store.get("t", a.id) is not None
    assert await store.get("t", c.id) is not None


async def test_items_are_bounded_across_conversations() -> None:
    store = InMemoryConversationStore(10, max_items=3)
    a, b = new_conversation({}), new_conversation({})
    await store.create("t", a, [message("1"), message("2")])
    await store.create("t", b, [message("3")])
    assert await store.append("t", b.id, [message("4")]) is True
    # Four items over a bound of three: the older conversation left.
    assert await store.get("t", a.id) is None
    assert len(await store.items("t", b.id) or []) == 2
    # The one written stays even alone over the bound.
    assert await store.append("t", b.id, [message(str(i)) for i in range(5)]) is True
    assert len(await store.items("t", b.id) or []) == 7
    # Deleting gives room back.
    assert await store.delete("t", b.id) is True
    await store.create("t", a, [message("1"), message("2"), message("3")])
    assert len(await store.items("t", a.id) or []) == 3
