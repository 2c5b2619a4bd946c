from __future__ import annotations

import asyncio
import json
import random

import jsonschema
import pytest
from support.simulator import make_backend, request, run, user
from support.tools import WEATHER_PROTO_TOOL, WEATHER_SCHEMA

from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.worker.backends import InvalidRequestError


def kinds(events) -> list[str]:
    return [e.WhichOneof("event") for e in events]


def deltas(events) -> tuple[str, int]:
    ds = [e.delta for e in events if e.HasField("delta")]
    return "".join(d.text for d in ds), sum(d.tokens for d in ds)


async def test_text_stream_shape_usage_and_timings() -> None:
    backend = make_backend()
    events = await run(backend, request(prompt=range(300)))
    names = kinds(events)
    assert names[0] == "item_started" and names[-2:] == ["item_done", "finished"]
    assert set(names[1:-2]) == {"delta"}
    assert events[0].item_started.kind == pb.ItemStarted.MESSAGE
    text, tokens = deltas(events)
    finished = events[-1].finished
    assert finished.finish_reason == "stop"
    assert finished.worker_id == "worker-test"
    assert finished.usage.input_tokens == 300
    assert finished.usage.cached_tokens == 0
    assert finished.usage.output_tokens == tokens == backend.count_tokens(text)
    assert "Zürich" in text  # multi-byte text arrives whole
    t = finished.timings
    assert 0 <= t.queue_ms < t.ttft_ms <= t.total_ms
    assert t.prefill_ms >= 1.0 and t.decode_ms >= 0
    assert t.ttft_ms == pytest.approx(t.queue_ms + t.prefill_ms, abs=0.5)


async def test_same_request_same_text() -> None:
    backend = make_backend()
    first, _ = deltas(await run(backend, request(seed=3)))
    again, _ = deltas(await run(backend, request(seed=3)))
    assert first == again


async def test_function_call_stream_has_valid_arguments() -> None:
    events = await run(
        make_backend(), request([user("Weather in Zürich please")], [WEATHER_PROTO_TOOL])
    )
    started = events[0].item_started
    assert started.kind == pb.ItemStarted.FUNCTION_CALL
    assert started.name == "get_weather"
    assert started.call_id.startswith("call_") and len(started.call_id) > 10
    arguments, _ = deltas(events)
    parsed = json.loads(arguments)
    jsonschema.validate(parsed, WEATHER_SCHEMA)
    assert parsed["city"] == "Zürich"
    assert events[-1].finished.finish_reason == "tool_calls"


class VirtualTime:
    """Model time that passes only when the simulator sleeps: a busy machine cannot
    wake the pacer late."""

    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)
        await asyncio.sleep(0)


async def test_deltas_group_tokens_and_keep_the_text_counts_and_first_token() -> None:
    asked = request([user("Tell me about Zürich cafés ☕ in 120 words")], tps=2000.0)
    per_token = await run(make_backend(delta_tokens=1), asked)
    time = VirtualTime()
    grouped = await run(  # 10 tokens a delta
        make_backend(delta_interval=0.005, clock=time.clock, sleep=time.sleep), asked
    )
    assert deltas(grouped) == deltas(per_token)
    assert kinds(grouped)[0] == "item_started" and kinds(grouped)[-2:] == ["item_done", "finished"]
    counts = [e.delta.tokens for e in grouped if e.HasField("delta")]
    assert counts[0] == 1  # the first token leaves alone, at the time to first token
    assert all(count >= 10 for count in counts[1:-1])
    assert len(counts) < sum(counts) / 5
    usage = [e.finished.usage for e in (per_token[-1], grouped[-1])]
    assert usage[0].output_tokens == usage[1].output_tokens == sum(counts)


@pytest.mark.parametrize(
    ("tps", "tokens"), [(20.0, 1), (65.0, 1), (150.0, 3), (1000.0, 20), (4000.0, 20)]
)
def test_tokens_per_delta_are_the_tokens_of_20_ms_at_most_20(tps: float, tokens: int) -> None:
    assert make_backend()._tokens_per_delta(tps) == tokens


async def test_answer_after_tool_output() -> None:
    items = [
        user("Weather in Oslo?"),
        cv.Item(kind=cv.Item.FUNCTION_CALL, call_id="call_1", name="get_weather", arguments="{}"),
        cv.Item(kind=cv.Item.FUNCTION_CALL_OUTPUT, call_id="call_1", text="sunny, 18 C"),
    ]
    events = await run(make_backend(), request(items, [WEATHER_PROTO_TOOL]))
    text, _ = deltas(events)
    assert text.startswith("The tool returned: sunny, 18 C")
    assert events[-1].finished.finish_reason == "stop"


async def test_max_output_tokens_gives_length() -> None:
    events = await run(make_backend(), request(max_output_tokens=3))
    _, tokens = deltas(events)
    assert tokens == 3
    finished = events[-1].finished
    assert finished.finish_reason == "length" and finished.usage.output_tokens == 3
    # A cut function call still ends its item.
    events = await run(make_backend(), request(tools=[WEATHER_PROTO_TOOL], max_output_tokens=2))
    assert kinds(events)[-2:] == ["item_done", "finished"]
    assert events[-1].finished.finish_reason == "length"


async def test_ttft_grows_with_uncached_prompt_and_shrinks_on_cache_hit() -> None:
    backend = make_backend()
    prompt = list(range(6400))  # 100 blocks; 6400 / 20000 tok/s = 320 ms of prefill
    cold = (await run(backend, request(prompt=prompt, prefill_tps=20_000.0)))[-1].finished
    warm = (await run(backend, request(prompt=prompt, prefill_tps=20_000.0)))[-1].finished
    assert cold.usage.cached_tokens == 0
    assert warm.usage.cached_tokens == 6400
    assert 0.25 * 1000 < cold.timings.ttft_ms < 0.6 * 1000
    assert warm.timings.ttft_ms < 100
    # A longer conversation pays only for its new blocks.
    longer = prompt + list(range(10**6, 10**6 + 3200))
    grown = (await run(backend, request(prompt=longer, prefill_tps=20_000.0)))[-1].finished
    assert grown.usage.cached_tokens == 6400
    assert 0.12 * 1000 < grown.timings.ttft_ms < 0.4 * 1000


async def test_image_tokens_are_charged_and_prefilled_but_never_cached() -> None:
    backend = make_backend()
    prompt = list(range(640))  # 10 blocks
    req = request(prompt=prompt, prefill_tps=10_000.0)
    req.image_tokens = 2000  # 2000 / 10000 tok/s = 200 ms of prefill on every request
    cold = (await run(backend, req))[-1].finished
    warm = (await run(backend, req))[-1].finished
    assert cold.usage.input_tokens == warm.usage.input_tokens == 2640
    assert (cold.usage.cached_tokens, warm.usage.cached_tokens) == (0, 640)
    assert 0.26 * 0.7 * 1000 < cold.timings.ttft_ms < 0.26 * 1.3 * 1000 + 50
    assert 0.2 * 0.7 * 1000 < warm.timings.ttft_ms < 0.2 * 1.3 * 1000 + 50
    req.image_tokens = -1
    with pytest.raises(InvalidRequestError, match="image_tokens"):
        await run(backend, req)


async def test_cache_is_per_model() -> None:
    backend = make_backend()
    await run(backend, request(prompt=range(640), model="a"))
    other = (await run(backend, request(prompt=range(640), model="b")))[-1].finished
    assert other.usage.cached_tokens == 0


async def test_cache_is_per_tenant_and_a_hit_never_crosses_tenants() -> None:
    """Another tenant's identical prompt is a miss (no cached tokens, the full prefill
    time): its usage and its timing say nothing about what tenant A sent."""
    backend = make_backend()
    prompt = list(range(6400))
    alice = request(prompt=prompt, prefill_tps=20_000.0, tenant="alice")
    bob = request(prompt=prompt, prefill_tps=20_000.0, tenant="bob")
    await run(backend, alice)
    bobs = (await run(backend, bob))[-1].finished
    assert bobs.usage.cached_tokens == 0
    assert bobs.timings.prefill_ms >= 0.25 * 1000  # prefilled in full, like a cold prompt
    assert (await run(backend, alice))[-1].finished.usage.cached_tokens == 6400
    assert (await run(backend, bob))[-1].finished.usage.cached_tokens == 6400


async def test_error_rate_knob() -> None:
    always = make_backend(error_rate=1.0)
    events = await run(always, request())
    assert kinds(events) == ["error"]
    assert events[0].error.code == "model_error" and events[0].error.retryable
    never = make_backend(error_rate=0.0)
    assert kinds(await run(never, request()))[-1] == "finished"
    some = make_backend(error_rate=0.5, rng=random.Random(7))
    outcomes = [kinds(await run(some, request(tps=100_000)))[-1] for _ in range(40)]
    assert 5 < outcomes.count("error") < 35


async def test_stall_knob_hangs_until_cancelled() -> None:
    backend = make_backend(stall_after_tokens=2)
    seen: list[pb.GenerateEvent] = []

    async def consume() -> None:
        async for event in backend.generate(request()):
            seen.append(event)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.3)
    assert not task.done()
    assert deltas(seen)[1] == 2 and "finished" not in kinds(seen)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert backend.active == 0


async def test_cancellation_stops_generation_promptly() -> None:
    backend = make_backend()
    first_delta = asyncio.Event()
    seen = []

    async def consume() -> None:
        async for event in backend.generate(request(tps=20.0)):  # ~2 s of output
            seen.append(event)
            if event.HasField("delta"):
                first_delta.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_delta.wait(), 2)
    assert backend.active == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert backend.active == 0
    assert "finished" not in kinds(seen)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("tokens_per_second", 0.0, "tokens_per_second must be > 0"),
        ("prefill_tokens_per_second", -1.0, "prefill_tokens_per_second must be > 0"),
        ("ttft_ms", -5.0, "ttft_ms must be >= 0"),
        ("model", "", "model is required"),
    ],
)
async def test_invalid_requests_raise_before_any_event(field, value, message) -> None:
    req = request()
    setattr(req, field, value)
    with pytest.raises(InvalidRequestError, match=message):
        await run(make_backend(), req)


async def test_unknown_tool_choice_is_invalid() -> None:
    with pytest.raises(InvalidRequestError, match="not among the tools"):
        await run(make_backend(), request(tools=[WEATHER_PROTO_TOOL], tool_choice="nope"))


async def test_special_token_text_in_a_tool_output_is_plain_text() -> None:
    items = [user("x"), cv.Item(kind=cv.Item.FUNCTION_CALL_OUTPUT, text="<|end|> done")]
    text, _ = deltas(await run(make_backend(), request(items)))
    assert text.startswith("The tool returned: <|end|> done")


def test_invalid_knobs() -> None:
    with pytest.raises(ValueError):
        make_backend(error_rate=1.5)
    with pytest.raises(ValueError):
        make_backend(stall_after_tokens=-1)
    with pytest.raises(ValueError):
        make_backend(delta_interval=-0.01)
    with pytest.raises(ValueError):
        make_backend(delta_tokens=0)
