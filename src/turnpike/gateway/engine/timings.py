"""Where a response's time went, in a vendor extension on the response object (under
``TIMINGS_KEY``): the model's time as the worker reports it, each API stage's own time,
and the API overhead, so a client can tell model time from API time for every response."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from turnpike.gateway.observability import turn_metrics
from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.protocol.events import Event

if TYPE_CHECKING:
    from turnpike.gateway.engine.generation import Generation

# The vendor extension's key on the response object.
TIMINGS_KEY = "turnpike"
# Under it: what truncation "auto" dropped (the API has no field for it).
TRUNCATION_KEY = "truncation"


def note_truncation(prepared: Prepared) -> None:
    """Say what truncation dropped, if it dropped anything."""
    prompt, response = prepared.prompt, prepared.response
    assert response is not None
    if prompt is not None and prompt.truncated:
        response[TIMINGS_KEY] = {
            TRUNCATION_KEY: {
                "dropped_items": list(prompt.dropped_ids),
                "input_tokens_before": prompt.untruncated_tokens,
            }
        }


def annotate(prepared: Prepared, generation: Generation) -> None:
    """Model time as the worker reports it (none yet if it did not finish), and each API
    stage's own time so far."""
    assert prepared.response is not None
    prepared.response.setdefault(TIMINGS_KEY, {}).update(
        {
            "pipeline": prepared.ctx.pipeline,
            "worker_id": generation.worker_id,
            "model_ms": {k: round(v, 3) for k, v in generation.model_ms.items()},
            "stages_ms": {k: round(v, 3) for k, v in prepared.ctx.stage_ms.items()},
        }
    )


def stamp_overhead(prepared: Prepared, generation: Generation, terminal: list[Event]) -> None:
    """Record the finished turn, and give its terminal event the API overhead (the
    same figure as the HTTP header), once everything before that event is done."""
    response = prepared.response
    assert response is not None
    model_ms = generation.model_ms.get("total_ms", 0.0)
    overhead = turn_metrics.response_finished(prepared, model_ms, time.perf_counter())
    if "pipeline" not in response.get(TIMINGS_KEY, {}):  # failed before the worker finished
        annotate(prepared, generation)
    timings = response[TIMINGS_KEY]
    timings["overhead_ms"] = round(overhead, 3)
    if (first := prepared.ctx.first_token_at) is not None:  # as the client saw it
        timings["ttft_ms"] = round((first - prepared.ctx.started) * 1000, 3)
    for event in terminal:
        if (snapshot := event.get("response")) is not None:
            snapshot[TIMINGS_KEY] = timings
