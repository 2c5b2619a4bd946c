"""The event queue between generation and a transport, and the sprint caches."""

import asyncio
from array import array

from gateway.caches import ModelConfigCache, TokenCache
from gateway.run import ResponseRun
from gateway.state import RenderedPrefix


def delta(seq, item="msg_1", text="a"):
    return {
        "type": "response.output_text.delta",
        "sequence_number": seq,
        "item_id": item,
        "delta": text,
    }


async def test_waiting_deltas_are_merged_and_delivered_ones_are_not():
    run = ResponseRun("resp_1")
    run.emit({"type": "response.created", "sequence_number": 0})
    run.emit(delta(1, text="Hel"))
    assert run.merge_delta("msg_1", "lo")  # the consumer has not taken seq 1 yet
    assert not run.merge_delta("msg_2", "x")  # another item never merges
    events = run.events()
    assert (await anext(events))["type"] == "response.created"
    first = await anext(events)
    assert first["delta"] == "Hello" and first["sequence_number"] == 1
    assert not run.merge_delta("msg_1", "!")  # seq 1 is gone: a new event is needed
    run.emit(delta(2, text="!"))
    run.emit({"type": "response.output_text.done", "sequence_number": 3})
    assert not run.merge_delta("msg_1", "?")  # a non-delta is newest: order is kept
    run.close()
    rest = [e async for e in events]
    assert [e["sequence_number"] for e in rest] == [2, 3]
    assert run.coalesced == 1


async def test_consumer_waits_for_the_producer():
    run = ResponseRun("resp_1")

    async def produce():
        await asyncio.sleep(0.01)
        run.emit(delta(0))
        run.close()

    task = asyncio.create_task(produce())
    assert [e["sequence_number"] async for e in run.events()] == [0]
    await task


def test_token_cache_is_bounded_by_tokens_and_scoped_by_tenant():
    cache = TokenCache(max_tokens=10)
    cache.put("t1", "r1", RenderedPrefix("h", array("I", range(6)), 2))
    cache.put("t1", "r2", RenderedPrefix("h", array("I", range(3)), 1))
    assert cache.get("t2", "r1") is None
    assert cache.get("t1", "r1") is not None  # r1 now most recent
    cache.put("t1", "r3", RenderedPrefix("h", array("I", range(4)), 1))
    assert cache.get("t1", "r2") is None and cache.held_tokens == 10


def test_token_cache_holds_a_render_kept_under_two_keys_once():
    """Sprint keeps a parentless render under its response id and its content key."""
    cache = TokenCache(max_tokens=10)
    rendered = RenderedPrefix("h", array("I", range(6)), 2)
    cache.put("t1", "resp_1", rendered)
    cache.put("t1", "content:abc", rendered)
    assert cache.held_tokens == 6 and cache.get("t1", "resp_1") is rendered
    cache.put("t1", "r2", RenderedPrefix("h", array("I", range(4)), 1))
    assert cache.held_tokens == 10
    cache.put("t1", "r3", RenderedPrefix("h", array("I", range(4)), 1))
    # Evicting one key of the shared render frees nothing; evicting both frees it.
    assert cache.get("t1", "resp_1") is None and cache.get("t1", "content:abc") is None
    assert cache.held_tokens == 8


def test_model_cache_expires():
    cache = ModelConfigCache(ttl_s=0.0)
    cache.put("m", object())
    assert cache.get("m") is None
    cache = ModelConfigCache(ttl_s=60)
    model = object()
    cache.put("m", model)
    assert cache.get("m") is model
