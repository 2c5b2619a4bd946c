"""Background responses across two gateway replicas sharing a real Redis, through the
official SDK: a stream started on one is resumed on the other, and a response generated
by one is cancelled (or deleted) through the other."""

from __future__ import annotations

import time
import uuid

import httpx
import openai
import pytest
from openai import OpenAI
from support.background import start_long_response, stream_then_drop

from turnpike.gateway.state.responses import StoredResponse
from turnpike.gateway.state.responses_redis import RedisResponseStore

pytestmark = pytest.mark.stack


def clients(replicas, key="sk-turnpike-dev"):
    return [OpenAI(base_url=base, api_key=key, max_retries=0) for base in replicas]


def test_a_stream_started_on_one_replica_resumes_on_the_other(two_replicas):
    a, b = clients(two_replicas)
    first = stream_then_drop(a, "turnpike-sim-65", 100, 5)
    response_id = first[0].response.id
    rest = list(b.responses.retrieve(response_id, stream=True, starting_after=4))
    sequence = [e.sequence_number for e in first + rest]
    assert sequence == list(range(len(sequence)))
    assert rest[-1].type == "response.completed"
    assert b.responses.retrieve(response_id).status == "completed"
    with pytest.raises(openai.BadRequestError) as err:
        for _ in b.responses.retrieve(response_id, stream=True, starting_after=sequence[-1] + 1):
            pass
    assert err.value.param == "starting_after"
    (bob,) = clients(two_replicas[1:], "sk-test-bob")
    with pytest.raises(openai.NotFoundError):
        for _ in bob.responses.retrieve(response_id, stream=True, starting_after=0):
            pass


def test_a_response_generated_on_one_replica_is_cancelled_through_the_other(two_replicas):
    a, b = clients(two_replicas)
    created, _ = start_long_response(a, b)
    cancelled = b.responses.cancel(created.id)
    assert cancelled.status == "cancelled"
    assert 0 < cancelled.usage.output_tokens < 2000
    assert a.responses.retrieve(created.id).status == "cancelled"


def test_a_response_running_on_one_replica_and_deleted_through_the_other_stays_deleted(
    two_replicas,
):
    """Replica b deletes it; replica a, which runs it, stops it and does not store it
    again when it ends (the store's tombstone, and the cancel channel)."""
    a, b = clients(two_replicas)
    created, _ = start_long_response(a, b)
    assert b.responses.delete(created.id) is None
    for client in (a, b):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(created.id)
    # a stops it (cancelled through the channel) and its last write is refused.
    deadline = time.monotonic() + 15
    while a_is_running(two_replicas[0]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not a_is_running(two_replicas[0])
    for client in (a, b):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(created.id)


def a_is_running(base: str) -> bool:
    """Whether the replica at ``base`` still holds an admission slot."""
    ready = httpx.get(base.removesuffix("/v1") + "/readyz", timeout=10).json()
    return ready["admission"]["in_flight"] > 0


async def test_a_put_after_a_delete_does_not_bring_the_response_back(redis_url):
    store = RedisResponseStore(redis_url, 60, prefix=f"turnpike-test:{uuid.uuid4().hex}")
    try:
        record = StoredResponse("alice", {"id": "resp_1", "status": "in_progress", "output": []})
        await store.put(record)
        assert await store.delete("alice", "resp_1") is True
        record.response["status"] = "completed"
        await store.put(record)  # the replica that ran it, finishing
        assert await store.get("alice", "resp_1") is None
        assert await store.delete("alice", "resp_1") is False
        # Never stored, so nothing to tombstone: a later put of that id is kept.
        await store.put(StoredResponse("alice", {"id": "resp_2", "output": []}))
        assert await store.delete("bob", "resp_2") is False
        assert await store.get("alice", "resp_2") is not None
    finally:
        await store.close()
