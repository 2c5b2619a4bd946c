"""A ``compaction_trigger`` generates nothing, so a history over the model's context
window is still compacted (that is how a client gets back under it), counted whole and
routed to no worker; without the trigger the same input is a 400
``context_length_exceeded``."""

from __future__ import annotations

import pytest
from support.gateway_standins import create, prepare, prompt_of

from turnpike.gateway.pipeline.variants import LEGACY, SPRINT
from turnpike.gateway.protocol.errors import ApiError

TRIGGER = {"type": "compaction_trigger"}
LONG = [{"role": "user", "content": "hi"}]


async def test_a_trigger_over_the_context_window_is_compacted(engine, backends) -> None:
    backends.tokenizer.per_item = 200  # over the context window of 100
    for pipeline in (LEGACY, SPRINT):
        with pytest.raises(ApiError) as err:
            await prepare(engine, create(input=LONG), pipeline)
        assert err.value.code == "context_length_exceeded"
        for truncation in ("disabled", "auto"):
            request = create(input=[*LONG, TRIGGER], truncation=truncation)
            prepared = await prepare(engine, request, pipeline)
            assert prepared.request.compact_now
            assert not prompt_of(prepared).truncated
            assert len(prompt_of(prepared).tokens) > 100  # the whole history counted
            assert prepared.route is None  # no worker: nothing is generated
