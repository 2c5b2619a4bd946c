"""The transport-independent core: one create request in, a stream of Responses events
out. HTTP JSON, SSE and WebSocket are thin adapters over it.

``prepare`` runs a pipeline's stages (``preparation``) and raises ``ApiError`` for
anything the client must fix, so transports can still answer with a plain error.
``start`` then drives the response in a task of its own (``turn``: generation on a
worker in ``generation``, then ``after_turn``): the response is stored, cached and billed
even when the client goes away mid-stream. ``stop`` and ``drain`` end those tasks; the
endpoints that only read a conversation are in ``conversation_reads``.
"""

from __future__ import annotations

import asyncio
import contextlib

from opentelemetry import trace

from turnpike.gateway.engine import preparation
from turnpike.gateway.engine.after_turn import AfterTurn
from turnpike.gateway.engine.background import BackgroundResponses
from turnpike.gateway.engine.conversation_reads import ConversationReads
from turnpike.gateway.engine.event_queue import ResponseEventQueue
from turnpike.gateway.engine.generation import WorkerGeneration
from turnpike.gateway.engine.live_responses import LiveResponses
from turnpike.gateway.engine.rollout import Rollout
from turnpike.gateway.engine.turn import TurnDriver
from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.pipeline.request_context import RequestContext
from turnpike.gateway.pipeline.stages import Resources
from turnpike.gateway.pipeline.variants import Pipeline
from turnpike.gateway.protocol.items import Item
from turnpike.gateway.protocol.request import CreateRequest
from turnpike.gateway.tenancy.admission import AdmissionControl
from turnpike.gateway.upstream.billing_outbox import BillingOutbox

# How long a stop (a delete, another replica's cancel) waits for the response to finish.
STOP_WAIT_S = 10.0


class ResponseEngine:
    def __init__(
        self,
        res: Resources,
        outbox: BillingOutbox,
        admission: AdmissionControl | None = None,
        worker_silence_s: float = 30.0,
        inject_wait_s: float = 300.0,
        inject_max_steps: int = 64,
    ) -> None:
        self.res = res
        self.background = BackgroundResponses()
        self.live = LiveResponses()
        self._tasks: set[asyncio.Task[None]] = set()
        self._after = AfterTurn(res, outbox, admission, self.live, self.background)
        generator = WorkerGeneration(res, worker_silence_s)
        rollout = Rollout(res, generator, inject_wait_s, inject_max_steps)
        self._turns = TurnDriver(res, self.background, generator, self._after, rollout)
        self._reads = ConversationReads(res)

    async def prepare(
        self, request: CreateRequest, ctx: RequestContext, pipeline: Pipeline
    ) -> Prepared:
        return await preparation.prepare(request, ctx, pipeline, self.res)

    # Responses in flight ---------------------------------------------------
    def start(self, prepared: Prepared) -> ResponseEventQueue:
        queue = ResponseEventQueue(prepared.response_id)
        self.live.add(prepared.ctx.tenant, prepared.response_id, queue, prepared.request.store)
        if prepared.request.background:
            self.background.track(prepared.ctx.tenant, prepared.response_id, queue)
        span = prepared.ctx.span
        assert prepared.model is not None
        span.set_attribute("turnpike.model", prepared.model.id)
        if prepared.conversation is not None:
            span.set_attribute("gen_ai.conversation.id", prepared.conversation.conversation_id)
        # The task runs in a copy of the current context: generation, and the
        # finishing that ends the span, happen inside the response's span.
        drive = self._turns.drive(prepared, queue)
        if span is trace.INVALID_SPAN:  # tracing off: no context to carry
            task = asyncio.create_task(drive, name=f"response {queue.response_id}")
        else:
            with trace.use_span(span, end_on_exit=False):
                task = asyncio.create_task(drive, name=f"response {queue.response_id}")
        # The task owns the admission slot from here: AfterTurn.finish gives it back,
        # or, for a task cancelled before it ran (shutdown), _after_task.
        admitted = prepared.ctx.admission
        if admitted is not None:
            admitted.handed_over = True
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: self._after_task(prepared))
        return queue

    async def stop(self, tenant: str, response_id: str, wait_s: float) -> bool:
        """Stop the tenant's response if it runs in this process (a background one is
        cancelled, a foreground one stops as when its client leaves), and wait, at most
        ``wait_s``, until it has finished: stored (unless deleted) and billed. Whether
        it ran here."""
        live = self.live.get(tenant, response_id)
        if live is None:
            return False
        if (running := self.background.running(tenant, response_id)) is not None:
            self.background.request_cancel(running)
        else:
            live.queue.abandon()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(live.finished.wait(), wait_s)
        return True

    async def drain(self, timeout: float) -> None:
        """Let responses in flight finish (graceful shutdown)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    def _after_task(self, prepared: Prepared) -> None:
        """What AfterTurn.finish does not do when the task never ran it."""
        ctx = prepared.ctx
        self.live.finished(ctx.tenant, prepared.response_id)
        if ctx.admission is not None and not ctx.admission.released:
            task = asyncio.get_running_loop().create_task(self._after.release(ctx, 0))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # Endpoints that only read ----------------------------------------------
    async def count_input_tokens(self, request: CreateRequest, tenant: str) -> int:
        return await self._reads.count_input_tokens(request, tenant)

    async def compact(self, request: CreateRequest, tenant: str) -> tuple[list[Item], int]:
        return await self._reads.compact(request, tenant)

    async def input_items(self, tenant: str, response_id: str) -> list[Item] | None:
        return await self._reads.input_items(tenant, response_id)
