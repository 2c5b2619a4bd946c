"""One response's task, from ``response.created`` to its terminal event: the response
stored as in progress, compacted when ``context_management`` asks, generated on a worker
(``generation``) unless the request only compacts or stores, and finished (``after_turn``)
however generation ended: completed, cancelled when its client or a stop abandoned it,
or failed."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Coroutine
from typing import Any, TypeVar

from turnpike.gateway.engine.after_turn import AfterTurn
from turnpike.gateway.engine.background import BackgroundResponses
from turnpike.gateway.engine.event_queue import ResponseEventQueue
from turnpike.gateway.engine.generation import Generation, StepEnd, WorkerGeneration
from turnpike.gateway.engine.rollout import Rollout
from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.pipeline.stages import Resources
from turnpike.gateway.protocol.errors import store_unavailable
from turnpike.gateway.protocol.events import Event, ResponseEvents
from turnpike.gateway.protocol.response_object import usage
from turnpike.gateway.sealed import compaction, encrypted_reasoning
from turnpike.gateway.state.responses import StoreUnavailable

log = logging.getLogger(__name__)
T = TypeVar("T")


class TurnDriver:
    def __init__(
        self,
        res: Resources,
        background: BackgroundResponses,
        generator: WorkerGeneration,
        after: AfterTurn,
        rollout: Rollout,
    ) -> None:
        self.res = res
        self.background = background
        self.generator = generator
        self.after = after
        self.rollout = rollout

    async def drive(self, prepared: Prepared, queue: ResponseEventQueue) -> None:
        assert prepared.response is not None
        events = ResponseEvents(prepared.response)
        if encrypted_reasoning.INCLUDE in prepared.request.include:
            sealer, tenant = self.res.sealer, prepared.ctx.tenant
            events.seal_reasoning = lambda text: encrypted_reasoning.seal(sealer, tenant, text)
        generation = Generation(prepared.route)
        terminal: list[Event] = []
        steering = prepared.ctx.steering
        if steering is not None:
            steering.attach(events, queue.emit)
        if prepared.ctx.injection is not None:
            prepared.ctx.injection.attach(events, queue.emit)
        try:
            queue.emit(events.created())
            if prepared.request.store:
                await self.after.store(prepared)
            queue.emit(events.in_progress())
            for event in self._compact_if_over(prepared, events):
                queue.emit(event)
            if prepared.request.compact_now:  # the compaction item is the whole answer
                terminal = [events.completed(usage(prepared.input_tokens, 0, 0))]
            elif not prepared.request.generate:
                terminal = [events.completed(usage(0, 0, 0))]
            else:
                save_progress = functools.partial(self.after.store, prepared)
                inbox = prepared.ctx.injection
                if inbox is not None:  # one rollout of steps (turnpike.gateway.engine.rollout)
                    generate = self.rollout.run(
                        prepared, inbox, generation, events, queue, save_progress
                    )
                else:
                    generate = self.generator.run(
                        prepared, generation, events, queue, save_progress
                    )
                running = self.background.running(prepared.ctx.tenant, prepared.response_id)
                with prepared.ctx.stage("generate"):
                    if running is None:
                        done = await _unless_abandoned(generate, queue)
                    else:
                        done = await self.background.generate(running, generate)
                    if isinstance(done, StepEnd):
                        terminal = done.terminal(events)
                    elif done is not None:
                        terminal = done
                    else:
                        billed_input = generation.input_tokens or prepared.input_tokens
                        terminal = events.cancelled(
                            usage(billed_input, 0, generation.output_tokens)
                        )
        except StoreUnavailable as err:
            log.warning("response %s failed: %s", queue.response_id, err)
            terminal = events.failed("service_unavailable", store_unavailable().message)
        except Exception:
            log.exception("response %s failed", queue.response_id)
            terminal = events.failed(
                "server_error", "The server had an error while generating the response."
            )
        finally:
            if steering is not None:  # the ending is decided: a steer now goes to a successor
                steering.close()
            if prepared.ctx.injection is not None:  # and no inject is committed any more
                prepared.ctx.injection.close()
            await self.after.finish(prepared, events, generation, terminal, queue)

    def _compact_if_over(self, prepared: Prepared, events: ResponseEvents) -> list[Event]:
        """``context_management`` compaction: past the threshold, the whole conversation
        so far (history and input) sealed into one compaction item, first in the output.
        A client sends it, and the output after it, instead of the history."""
        threshold = prepared.request.compact_threshold
        if prepared.prompt is None or prepared.conversation is None:
            return []
        # A compaction_trigger item compacts whatever the size (turnpike.gateway.sealed.compaction).
        if not prepared.request.compact_now and (
            threshold is None or prepared.input_tokens <= threshold
        ):
            return []
        items = [*prepared.conversation.history, *prepared.request.input_items]
        item = compaction.seal_items(self.res.sealer, prepared.ctx.tenant, items)
        return events.add_item(item)


async def _unless_abandoned(
    generate: Coroutine[Any, Any, T], queue: ResponseEventQueue
) -> T | None:
    """A foreground response's generation, stopped (None) once its one reader has gone:
    cancelling it cancels the worker's stream, and the worker stops generating."""
    if queue.abandoned.is_set():
        generate.close()
        return None
    task = asyncio.create_task(generate)
    gone = asyncio.create_task(queue.abandoned.wait())
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        gone.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return None
