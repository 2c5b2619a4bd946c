"""Tenant scoping of what the gateway keeps in Redis (a real redis-server), where replicas
share it: responses, the events of background responses and the cancel channel. Another
tenant's id, however it is spelled, reaches none of them. (Conversations: the store
contract, test_conversation_store_redis.)"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest

from turnpike.gateway.state.background_redis import SharedBackground
from turnpike.gateway.state.responses import StoredResponse
from turnpike.gateway.state.responses_redis import RedisResponseStore

TTL_S = 60


@pytest.fixture
def prefix() -> str:
    return f"turnpike-test:{uuid.uuid4().hex}"


@pytest.fixture
async def store(redis_url: str, prefix: str) -> AsyncIterator[RedisResponseStore]:
    made = RedisResponseStore(redis_url, TTL_S, prefix=f"{prefix}:response")
    yield made
    await made.close()


@pytest.fixture
async def background(redis_url: str, prefix: str) -> AsyncIterator[SharedBackground]:
    made = SharedBackground(redis_url, TTL_S, 16, prefix=f"{prefix}:background")
    yield made
    await made.close()


# Ways to spell alice's response from bob's side: as is, with her tenant name in front
# (the key's separator), and with a newline (the cancel channel's separator).
SPELLINGS = ("resp_alice1", "alice:resp_alice1", "x:alice:resp_alice1", "alice\nresp_alice1")


async def test_another_tenant_can_neither_read_nor_delete_a_stored_response(store):
    await store.put(StoredResponse("alice", {"id": "resp_alice1", "output": ["secret"]}))
    for spelling in SPELLINGS:
        assert await store.get("bob", spelling) is None
        assert await store.delete("bob", spelling) is False
    kept = await store.get("alice", "resp_alice1")
    assert kept is not None and kept.response["output"] == ["secret"]


async def test_another_tenant_reads_no_background_events(background):
    record = background.recorder("alice", "resp_alice1")
    record({"type": "response.created", "sequence_number": 0})
    for _ in range(100):  # written in the background, in order
        if await background.events("alice", "resp_alice1") is not None:
            break
        await asyncio.sleep(0.05)
    assert await background.events("alice", "resp_alice1") is not None
    for spelling in SPELLINGS:
        assert await background.events("bob", spelling) is None


async def test_a_cancel_always_carries_the_tenant_that_asked(background):
    """A replica cancels only (tenant, id) it runs; whatever id bob sends, the cancel
    arrives as bob's."""
    heard: list[tuple[str, str]] = []

    async def on_cancel(tenant: str, response_id: str) -> None:
        heard.append((tenant, response_id))

    background.listen(on_cancel)
    # Subscribed once a probe is heard (a message published before is not delivered).
    for _ in range(200):
        await background.request_cancel("bob", "probe")
        await asyncio.sleep(0.05)
        if heard:
            break
    for spelling in SPELLINGS:
        await background.request_cancel("bob", spelling)
    for _ in range(200):
        if heard[-1][1] == SPELLINGS[-1]:
            break
        await asyncio.sleep(0.05)
    asked = [(tenant, rid) for tenant, rid in heard if rid != "probe"]
    assert asked == [("bob", spelling) for spelling in SPELLINGS]
