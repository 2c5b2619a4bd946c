"""The simulator's reasoning (``reasoning.effort``): a reasoning item before the answer,
paced like it, sized by the effort, deterministic per seed, counted in usage."""

from __future__ import annotations

from support.simulator import make_backend, request, run

from turnpike.inference.v1 import inference_pb2 as pb


def reasoning_request(effort: str, summary: str = "", **kwargs) -> pb.GenerateRequest:
    req = request(**kwargs)
    req.reasoning_effort = effort
    req.reasoning_summary = summary
    return req


def items_of(events) -> list[tuple[int, str, int, str]]:
    """(kind, text, tokens, summary) of each item in the stream."""
    items = []
    for event in events:
        which = event.WhichOneof("event")
        if which == "item_started":
            items.append([event.item_started.kind, "", 0, ""])
        elif which == "delta" and event.delta.summary:
            items[-1][3] += event.delta.text
        elif which == "delta":
            items[-1][1] += event.delta.text
            items[-1][2] += event.delta.tokens
    return [tuple(item) for item in items]


async def test_reasoning_item_first_then_the_answer_with_reasoning_tokens() -> None:
    backend = make_backend()
    events = await run(backend, reasoning_request("medium"))
    items = items_of(events)
    assert [kind for kind, *_ in items] == [pb.ItemStarted.REASONING, pb.ItemStarted.MESSAGE]
    (_, thought, thought_tokens, summary), (_, answer, answer_tokens, _) = items
    assert thought and answer and not summary
    assert thought_tokens == backend.count_tokens(thought)
    usage = events[-1].finished.usage
    assert usage.reasoning_tokens == thought_tokens > 0
    assert usage.output_tokens == thought_tokens + answer_tokens
    # The answer is the same as without reasoning.
    plain = items_of(await run(backend, request()))
    assert plain == [(pb.ItemStarted.MESSAGE, answer, answer_tokens, "")]


async def test_effort_scales_the_reasoning_deterministically() -> None:
    backend = make_backend()
    counts = {}
    for effort in ("low", "medium", "high"):
        first = items_of(await run(backend, reasoning_request(effort)))
        assert first == items_of(await run(backend, reasoning_request(effort)))
        counts[effort] = first[0][2]
    assert counts["low"] < counts["medium"] < counts["high"]
    assert items_of(await run(backend, reasoning_request("none")))[0][0] == pb.ItemStarted.MESSAGE


async def test_summary_when_asked_and_a_limit_within_the_reasoning() -> None:
    backend = make_backend()
    items = items_of(await run(backend, reasoning_request("low", "detailed")))
    assert items[0][3].startswith("**")
    events = await run(backend, reasoning_request("high", max_output_tokens=16))
    assert [kind for kind, *_ in items_of(events)] == [pb.ItemStarted.REASONING]
    finished = events[-1].finished
    assert finished.finish_reason == "length"
    assert finished.usage.output_tokens == finished.usage.reasoning_tokens == 16
