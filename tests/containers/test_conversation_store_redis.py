"""RedisConversationStore on a real redis-server: the store contract (tenant scoping, a
deleted conversation never grows back), two stores (as two gateway replicas) sharing a
conversation, and every key expiring."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from gateway.conversation_store import new_conversation
from gateway.conversation_store_redis import RedisConversationStore
from redis import asyncio as aioredis
from support.conversation_store_contract import check_conversation_store, message

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


async def test_replicas_share_a_conversation_and_every_key_expires(pair, redis_url) -> None:
    a, b = pair
    alice, _ = tenants()
    conversation = new_conversation({"k": "v"})
    await a.create(alice, conversation, [message("one")])
    assert await b.append(alice, conversation.id, [message("two")]) is True
    items = await a.items(alice, conversation.id)
    assert [i["content"][0]["text"] for i in items or []] == ["one", "two"]
    assert (await b.update(alice, conversation.id, {"k": "w"})) is not None
    assert (await a.get(alice, conversation.id)).metadata == {"k": "w"}  # type: ignore[union-attr]

    redis = aioredis.from_url(redis_url)
    try:
        keys = [key async for key in redis.scan_iter(f"turnpike:conversation:{alice}:*")]
        assert len(keys) == 2  # the conversation and its items
        for key in keys:
            assert 0 < await redis.ttl(key) <= TTL_S
    finally:
        await redis.aclose()
