"""A multi_agent response generated as one rollout (``response.inject``, beta; the rules
are in ``turnpike.gateway.protocol.injection``): steps of the model, each ending with
calls of the client's tools, joined by the outputs the client injects, in one response.

Each step after the first is prepared as a WebSocket follow-up of the step before: the
connection pipeline's stages on only the injected items (validated and safety-checked
alone, their tokens appended to the step's render, the worker reused), from a state
built as the connection cache builds one for a finished response. What a response costs
once (admission, creation, storing, billing, the connection's bookkeeping) it costs once
for the whole rollout; usage is the sum of its steps.

A rollout that cannot go on hands back to the classic protocol rather than fail: after
``max_steps`` steps, or once it has waited ``wait_s`` for the client's outputs, the
response completes with what it has (the committed items in its output), and the client
continues it with a ``response.create`` as it would any response ending in calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

from turnpike.gateway.engine.after_turn import next_state
from turnpike.gateway.engine.event_queue import ResponseEventQueue
from turnpike.gateway.engine.generation import Generation, StepEnd, WorkerGeneration
from turnpike.gateway.engine.timings import annotate
from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.pipeline.stages import Resources
from turnpike.gateway.pipeline.variants import CONNECTION
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.events import Event, ResponseEvents
from turnpike.gateway.protocol.injection import InjectInbox
from turnpike.gateway.protocol.items import Item
from turnpike.gateway.protocol.response_object import usage
from turnpike.gateway.state.connection_cache import ConnectionCache

# Under the response's timings (turnpike.gateway.engine.timings): one entry per step.
STEPS_KEY = "steps"


class Rollout:
    def __init__(
        self, res: Resources, generator: WorkerGeneration, wait_s: float, max_steps: int
    ) -> None:
        self.res = res
        self.generator = generator
        self.wait_s = wait_s
        self.max_steps = max_steps

    async def run(
        self,
        prepared: Prepared,
        inbox: InjectInbox,
        generation: Generation,
        events: ResponseEvents,
        queue: ResponseEventQueue,
        save_progress: Callable[[], Awaitable[None]],
    ) -> StepEnd | list[Event]:
        """Generate the rollout's steps; how the last ended, with the usage of all, or
        the terminal events of a step that failed."""
        assert prepared.response is not None
        output = prepared.response["output"]
        step, total, started = prepared, _Sum(), 0
        prepare_ms = _ms_since(prepared.ctx.started)
        wake = asyncio.Event()
        inbox.on_ready = wake.set
        try:
            for number in range(1, self.max_steps + 1):
                generation.input_tokens = total.input_tokens + step.input_tokens
                ended = await self.generator.run(step, generation, events, queue, save_progress)
                if not isinstance(ended, StepEnd):
                    return ended
                total.add(ended.usage, generation.model_ms)
                _note_step(prepared, generation, ended.usage, prepare_ms)
                if ended.unmet is not None:
                    inbox.close()
                    return StepEnd(total.usage(), unmet=ended.unmet)
                last = number == self.max_steps
                if ended.length or last or not (inbox.awaited or inbox.ready):
                    return self._end(inbox, events, queue, total, ended.length)
                step_output = output[started:]
                if not await self._outputs(inbox, wake, generation):
                    return self._end(inbox, events, queue, total, False)
                injected = inbox.take()
                for item in injected:
                    for event in events.add_item(item):
                        queue.emit(event)
                started = len(output)
                begun = time.perf_counter()
                try:
                    step = await self._next_step(step, generation, step_output, injected)
                except ApiError as err:
                    inbox.close()
                    return events.failed(err.code or "invalid_request", err.message)
                prepare_ms = _ms_since(begun)
            raise AssertionError("unreachable: the last step ends the rollout")
        finally:
            inbox.close()
            if total.model_ms:  # the response's model time is its steps'
                generation.model_ms = total.model_ms
                annotate(prepared, generation)

    async def _outputs(self, inbox: InjectInbox, wake: asyncio.Event, gen: Generation) -> bool:
        """Wait until every call of the step has its output (False: the wait ran out)."""
        begun = time.perf_counter()
        try:
            while not inbox.ready:
                wake.clear()
                remaining = self.wait_s - (time.perf_counter() - begun)
                if remaining <= 0:
                    return False
                try:
                    await asyncio.wait_for(wake.wait(), remaining)
                except TimeoutError:
                    return inbox.ready
            return True
        finally:
            gen.client_ms += _ms_since(begun)

    def _end(
        self,
        inbox: InjectInbox,
        events: ResponseEvents,
        queue: ResponseEventQueue,
        total: _Sum,
        length: bool,
    ) -> StepEnd:
        """The rollout ends: what was committed and not yet used goes into the output
        (nothing the client sent is lost), and the usage of every step is the response's."""
        inbox.close()
        for item in inbox.take():
            for event in events.add_item(item):
                queue.emit(event)
        return StepEnd(total.usage(), length)

    async def _next_step(
        self,
        step: Prepared,
        generation: Generation,
        step_output: list[Item],
        injected: list[Item],
    ) -> Prepared:
        """The next step, prepared as a connection follow-up of ``step`` with the injected
        items as its input: the step's state stands where a finished response's would."""
        assert step.response is not None
        state = next_state(step, generation, step_output)
        cache = ConnectionCache(1)
        cache.put(step.response_id, state)
        ctx = dataclasses.replace(step.ctx, connection_cache=cache, started=time.perf_counter())
        request = dataclasses.replace(
            step.request, input_items=injected, previous_response_id=step.response_id
        )
        following = Prepared(request, ctx, step.response_id)
        await CONNECTION.prepare(following, self.res)
        assert following.parent is not None and following.parent.from_connection_cache
        following.response, following.policy = step.response, step.policy
        return following


class _Sum:
    """The usage of a rollout's steps, added up."""

    def __init__(self) -> None:
        self.input_tokens = self.cached_tokens = self.output_tokens = self.reasoning = 0
        self.model_ms: dict[str, float] = {}

    def add(self, use: dict[str, Any], model_ms: dict[str, float]) -> None:
        for key, ms in model_ms.items():
            self.model_ms[key] = self.model_ms.get(key, 0.0) + ms
        self.input_tokens += use["input_tokens"]
        self.cached_tokens += use["input_tokens_details"]["cached_tokens"]
        self.output_tokens += use["output_tokens"]
        self.reasoning += use["output_tokens_details"]["reasoning_tokens"]

    def usage(self) -> dict[str, Any]:
        return usage(self.input_tokens, self.cached_tokens, self.output_tokens, self.reasoning)


def _note_step(
    prepared: Prepared, generation: Generation, use: dict[str, Any], prepare_ms: float
) -> None:
    """Each step's own figures in the response's timings: the model's time, the usage,
    and how long the API took to prepare it (a client tells the API's share per step)."""
    assert prepared.response is not None
    timings = prepared.response.setdefault("turnpike", {})
    timings.setdefault(STEPS_KEY, []).append(
        {
            "model_ms": {k: round(v, 3) for k, v in generation.model_ms.items()},
            "prepare_ms": round(prepare_ms, 3),
            "input_tokens": use["input_tokens"],
            "cached_tokens": use["input_tokens_details"]["cached_tokens"],
            "output_tokens": use["output_tokens"],
        }
    )


def _ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1000
