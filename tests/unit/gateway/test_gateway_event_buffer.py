"""The resume buffer of background responses (turnpike.gateway.state.event_buffer)."""

import asyncio

import pytest

from turnpike.gateway.engine.event_queue import ResponseEventQueue
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.state.event_buffer import EventBuffer


def event(seq, kind="response.output_text.delta"):
    return {"type": kind, "sequence_number": seq}


async def collect(events, starting_after):
    return [e["sequence_number"] async for e in events.follow(starting_after)]


async def test_replays_after_a_sequence_number_then_follows_live_events():
    events = EventBuffer().open("dev", "resp_1")
    for seq in range(3):
        events.append(event(seq))
    reader = asyncio.create_task(collect(events, 0))
    await asyncio.sleep(0)
    events.append(event(3))
    events.append(event(4, "response.completed"))
    assert await asyncio.wait_for(reader, 1) == [1, 2, 3, 4]
    # Once finished, a replay from the start still ends at the terminal event.
    assert await collect(events, -1) == [0, 1, 2, 3, 4]
    assert await collect(events, 3) == [4]


async def test_a_cursor_past_the_end_of_a_finished_response_is_refused():
    events = EventBuffer().open("dev", "resp_1")
    events.append(event(0))
    events.append(event(1, "response.incomplete"))
    events.check(1)  # nothing left to send, but nothing beyond the end
    with pytest.raises(ApiError) as err:
        events.check(2)
    assert err.value.status == 400 and err.value.param == "starting_after"


async def test_each_response_keeps_its_newest_events_only():
    events = EventBuffer(max_events=3).open("dev", "resp_1")
    for seq in range(5):
        events.append(event(seq))
    assert [e["sequence_number"] for e in events.events] == [2, 3, 4]
    with pytest.raises(ApiError) as err:
        events.check(0)  # event 1 was dropped
    assert err.value.param == "starting_after"
    events.check(1)  # 2, 3, 4 are kept


def test_the_oldest_response_leaves_first_and_tenants_are_apart():
    buffer = EventBuffer(max_responses=2)
    first = buffer.open("dev", "resp_1")
    buffer.open("dev", "resp_2")
    assert buffer.open("dev", "resp_1") is first  # opening again finds the same
    buffer.open("dev", "resp_3")
    assert len(buffer) == 2
    assert buffer.get("dev", "resp_1") is None and first.done  # a reader would stop
    assert buffer.get("bob", "resp_2") is None
    assert buffer.get("dev", "resp_2") is not None


async def test_a_buffered_queue_never_merges_deltas():
    buffer = EventBuffer()
    queue = ResponseEventQueue("resp_1")
    queue.sink = buffer.open("dev", "resp_1").append
    queue.emit({**event(0), "item_id": "msg_1", "delta": "a"})
    assert not queue.merge_delta("msg_1", "b")
    buffered = buffer.get("dev", "resp_1")
    assert buffered is not None
    assert [e["sequence_number"] for e in buffered.events] == [0]
