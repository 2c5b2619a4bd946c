"""RedisConversationStore on a real redis-server: the store contract (tenant scoping, a
deleted conversation never grows back, each conversation's bounds held by one script even
when appends race), two stores (as two gateway replicas) sharing a conversation, and
every key expiring."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from redis import asyncio as aioredis
from support.conversation_store_contract import (
    CONTRACT_BOUNDS,
    check_conversation_bounds,
    check_conversation_store,
    message,
)

from turnpike.gateway.state.conversation_bounds import ConversationTooLarge
from turnpike.gateway.state.conversations import new_conversation
from turnpike.gateway.state.conversations_redis import RedisConversationStore

TTL_S = 600


@pytest.fixture
async def pair(redis_url: str) -> AsyncIterator[tuple[RedisConversationStore, ...]]:
    stores = RedisConversationStore(redis_url, TTL_S), RedisConversationStore(redis_url, TTL_S)
    yield stores
    for store in stores:
        await store.close()


def tenants() -> tuple[str, str]:
    # Tenants of their own: the Redis is shared.
    suffix = uuid.uuid4().hex[:12]
    return f"alice-{suffix}", f"bob-{suffix}"


async def test_the_redis_store_keeps_the_contract(pair) -> None:
    await check_conversation_store(pair[0], *tenants())


async def test_the_redis_store_keeps_each_conversation_within_its_bounds(redis_url) -> None:
    store = RedisConversationStore(redis_url, TTL_S, bounds=CONTRACT_BOUNDS)
    try:
        await check_conversation_bounds(store, tenants()[0])
    finally:
        await store.close()


async def test_replicas_racing_cannot_both_cross_the_bound(redis_url) -> None:
    a, b = (RedisConversationStore(redis_url, TTL_S, bounds=CONTRACT_BOUNDS) for _ in "ab")
    try:
        alice, _ = tenants()
        conversation = new_conversation({})
        await a.create(alice, conversation, [message("first")])
        appends = [
            store.append(alice, conversation.id, [message(f"{i}")])
            for i in range(10)
            for store in (a, b)
        ]
        outcomes = await asyncio.gather(*appends, return_exceptions=True)
        assert outcomes.count(True) == CONTRACT_BOUNDS.max_items - 1
        assert len(await b.items(alice, conversation.id) or []) == CONTRACT_BOUNDS.max_items
    finally:
        await a.close()
        await b.close()


async def test_a_conversation_stored_before_its_bytes_were_kept_is_measured(redis_url) -> None:
    """One written before the store kept its bytes (no bytes key): the first append
    measures it, then counts on."""
    store = RedisConversationStore(redis_url, TTL_S, bounds=CONTRACT_BOUNDS)
    redis = aioredis.from_url(redis_url)
    try:
        alice, _ = tenants()
        conversation = new_conversation({})
        big = [message("b" * 1_000) for _ in range(4)]
        await store.create(alice, conversation, big[:3])
        await redis.delete(f"turnpike:conversation:{alice}:{conversation.id}:bytes")
        with pytest.raises(ConversationTooLarge):
            await store.append(alice, conversation.id, big[3:])
        assert await store.delete_item(alice, conversation.id, big[0]["id"]) is True
        assert await store.append(alice, conversation.id, big[3:]) is True
    finally:
        await store.close()
        await redis.aclose()


async def test_replicas_share_a_conversation_and_every_key_expires(pair, redis_url) -> None:
    a, b = pair
    alice, _ = tenants()
    conversation = new_conversation({"k": "v"})
    await a.create(alice, conversation, [message("one")])
    assert await b.append(alice, conversation.id, [message("two")]) is True
    items = await a.items(alice, conversation.id)
    assert [i["content"][0]["text"] for i in items or []] == ["one", "two"]
    assert (await b.update(alice, conversation.id, {"k": "w"})) is not None
    stored = await a.get(alice, conversation.id)
    assert stored is not None and stored.metadata == {"k": "w"}

    redis = aioredis.from_url(redis_url)
    try:
        keys = [key async for key in redis.scan_iter(f"turnpike:conversation:{alice}:*")]
        assert len(keys) == 3  # the conversation, its items, their bytes
        for key in keys:
            assert 0 < await redis.ttl(key) <= TTL_S
    finally:
        await redis.aclose()
