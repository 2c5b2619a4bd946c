"""The event queue between generation and a transport."""

import asyncio

from turnpike.gateway.engine.event_queue import ResponseEventQueue


def delta(seq, item="msg_1", text="a"):
    return {
        "type": "response.output_text.delta",
        "sequence_number": seq,
        "item_id": item,
        "delta": text,
    }


async def test_waiting_deltas_are_merged_and_delivered_ones_are_not():
    queue = ResponseEventQueue("resp_1")
    queue.emit({"type": "response.created", "sequence_number": 0})
    queue.emit(delta(1, text="Hel"))
    assert queue.merge_delta("msg_1", "lo")  # the consumer has not taken seq 1 yet
    assert not queue.merge_delta("msg_2", "x")  # another item never merges
    events = queue.events()
    assert (await anext(events))["type"] == "response.created"
    first = await anext(events)
    assert first["delta"] == "Hello" and first["sequence_number"] == 1
    assert not queue.merge_delta("msg_1", "!")  # seq 1 is gone: a new event is needed
    queue.emit(delta(2, text="!"))
    queue.emit({"type": "response.output_text.done", "sequence_number": 3})
    assert not queue.merge_delta("msg_1", "?")  # a non-delta is newest: order is kept
    queue.close()
    rest = [e async for e in events]
    assert [e["sequence_number"] for e in rest] == [2, 3]
    assert queue.coalesced == 1


async def test_consumer_waits_for_the_producer():
    queue = ResponseEventQueue("resp_1")

    async def produce():
        await asyncio.sleep(0.01)
        queue.emit(delta(0))
        queue.close()

    task = asyncio.create_task(produce())
    assert [e["sequence_number"] async for e in queue.events()] == [0]
    await task
