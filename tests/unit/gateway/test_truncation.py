"""``truncation: "auto"`` (turnpike.gateway.protocol.truncation and the render stage): the oldest whole
items go until the prompt fits the model's context window; system and developer
messages stay, a function call goes with its output, and the response names what was
dropped. ``"disabled"`` (the default) refuses an over-long prompt, naming ``input``."""

from __future__ import annotations

import pytest
from support.gateway_standins import create, prepare, prompt_of, response_of
from support.inference_items import call, message, output

from turnpike.gateway.engine.timings import TIMINGS_KEY, TRUNCATION_KEY
from turnpike.gateway.pipeline.variants import LEGACY, SPRINT
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.truncation import plan, smallest_fit

# The stand-in model's context window is 100 tokens; the stand-in tokenizer renders
# ``per_item`` tokens an item.
INPUT = [
    {"id": "msg_sys", "role": "system", "content": "Be brief."},
    {"id": "msg_a", "role": "user", "content": "first question"},
    {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call_output", "id": "fco_1", "call_id": "c1", "output": "done"},
    {"id": "msg_b", "role": "user", "content": "second question"},
]


def test_units_pin_system_messages_and_keep_calls_with_their_outputs() -> None:
    items = [
        message("developer", "rules"),
        message("user", "a"),
        call("c1", "f", "{}"),
        call("c2", "g", "{}"),
        output("c1", "one"),
        output("c2", "two"),
        message("user", "b"),
    ]
    truncation = plan(items)
    assert truncation.units == ((1,), (2, 4), (3, 5), (6,))
    assert truncation.max_drop == 3
    kept, _ = truncation.dropping(2)
    assert [i.role or i.call_id for i in kept] == ["developer", "c2", "c2", "user"]


async def test_smallest_fit_searches_for_the_fewest_drops() -> None:
    asked: list[int] = []

    async def fits(count: int) -> bool:
        asked.append(count)
        return count >= 5

    assert await smallest_fit(16, fits) == 5
    assert len(asked) <= 5  # a binary search, not one render a drop
    assert await smallest_fit(3, fits) is None


@pytest.mark.parametrize("pipeline", [LEGACY, SPRINT], ids=lambda p: p.name)
async def test_auto_drops_the_oldest_items_until_the_prompt_fits(
    engine, backends, pipeline
) -> None:
    backends.tokenizer.per_item = 20  # 5 items: 100 tokens, and the completion prompt
    prepared = await prepare(engine, create(input=INPUT, truncation="auto"), pipeline)
    prompt = prompt_of(prepared)
    assert prompt.truncated and prompt.dropped_ids == ("msg_a",)
    assert [i.id for i in prompt.kept_items or []] == ["msg_sys", "fc_1", "fco_1", "msg_b"]
    assert len(prompt.tokens) <= 100 < prompt.untruncated_tokens
    assert response_of(prepared)["truncation"] == "auto"
    assert response_of(prepared)[TIMINGS_KEY][TRUNCATION_KEY] == {
        "dropped_items": ["msg_a"],
        "input_tokens_before": prompt.untruncated_tokens,
    }


async def test_a_call_is_dropped_with_its_output(engine, backends) -> None:
    backends.tokenizer.per_item = 30
    prepared = await prepare(engine, create(input=INPUT, truncation="auto"), SPRINT)
    assert prompt_of(prepared).dropped_ids == ("msg_a", "fc_1", "fco_1")
    assert [i.id for i in prompt_of(prepared).kept_items or []] == ["msg_sys", "msg_b"]


async def test_a_prompt_that_fits_is_left_whole(engine, backends) -> None:
    prepared = await prepare(engine, create(input=INPUT, truncation="auto"), SPRINT)
    assert not prompt_of(prepared).truncated and TIMINGS_KEY not in response_of(prepared)


async def test_disabled_refuses_an_over_long_prompt(engine, backends) -> None:
    backends.tokenizer.per_item = 20
    with pytest.raises(ApiError) as err:
        await prepare(engine, create(input=INPUT), SPRINT)
    assert (err.value.status, err.value.code, err.value.param) == (
        400,
        "context_length_exceeded",
        "input",
    )


async def test_auto_refuses_what_no_truncation_fits(engine, backends) -> None:
    backends.tokenizer.per_item = 60  # the system message and the last item alone: 120
    with pytest.raises(ApiError) as err:
        await prepare(engine, create(input=INPUT, truncation="auto"), SPRINT)
    assert (err.value.code, err.value.param) == ("context_length_exceeded", "input")
