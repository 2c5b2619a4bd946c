"""The transport-independent core: one create request in, a stream of Responses events
out. HTTP JSON, SSE and WebSocket are thin adapters over it.

``prepare`` runs a pipeline's stages (``turnpike.gateway.pipeline.variants``) and raises ``ApiError`` for
anything the client must fix, so transports can still answer with a plain error.
``start`` then drives generation in a task of its own: the response is stored, cached
and billed even when the client goes away mid-stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry import trace

from turnpike import token_bytes
from turnpike.billing.v1 import billing_pb2
from turnpike.gateway.engine.background import BackgroundResponses
from turnpike.gateway.engine.event_queue import ResponseEventQueue
from turnpike.gateway.engine.live_responses import LiveResponses
from turnpike.gateway.observability import turn_metrics
from turnpike.gateway.observability.tracing import end_response_span
from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.pipeline.request_context import RequestContext
from turnpike.gateway.pipeline.stages import Resources
from turnpike.gateway.pipeline.stages.load_conversation import load_parent, load_stored_conversation
from turnpike.gateway.pipeline.stages.render import render_all
from turnpike.gateway.pipeline.stages.resolve_images import image_tokens
from turnpike.gateway.pipeline.stages.route import pick_worker
from turnpike.gateway.pipeline.stages.validate_history import join_conversation
from turnpike.gateway.pipeline.variants import Pipeline
from turnpike.gateway.protocol.errors import ApiError, store_unavailable
from turnpike.gateway.protocol.events import Event, ResponseEvents
from turnpike.gateway.protocol.items import Item, to_proto
from turnpike.gateway.protocol.request import CreateRequest
from turnpike.gateway.protocol.response_object import new_response, usage
from turnpike.gateway.sealed import compaction, encrypted_reasoning
from turnpike.gateway.state import conversation_bounds
from turnpike.gateway.state.conversation_state import ConversationState
from turnpike.gateway.state.responses import (
    StoredResponse,
    StoreUnavailable,
    history_of,
    load_chain,
)
from turnpike.gateway.tenancy.admission import AdmissionControl
from turnpike.gateway.upstream.billing_outbox import BillingOutbox
from turnpike.gateway.upstream.pdf_text import read_pdfs
from turnpike.gateway.upstream.worker_stream import WorkerSilentError, worker_events
from turnpike.ids import new_id
from turnpike.imageres.v1 import imageres_pb2
from turnpike.inference.v1 import inference_pb2
from turnpike.router.v1 import router_pb2

log = logging.getLogger(__name__)

# How long a stop (a delete, another replica's cancel) waits for the response to finish.
STOP_WAIT_S = 10.0
# How many workers a generation may try before it fails (connection refused only).
MAX_WORKER_ATTEMPTS = 3
# Vendor extension on the response object: where the time went (see _annotate).
TIMINGS_KEY = "turnpike"
# Under it: what truncation "auto" dropped (the API has no field for it).
TRUNCATION_KEY = "truncation"


@dataclass
class Generation:
    """What generating a response found out: the worker that served it (after any
    reroute) and the model's own timings."""

    route: router_pb2.RouteDecision | None
    model_ms: dict[str, float] = field(default_factory=dict)
    worker_id: str = ""
    output_tokens: int = 0  # streamed so far (what a cancelled response is billed)


async def _unless_abandoned(
    generate: Coroutine[Any, Any, list[Event]], queue: ResponseEventQueue
) -> list[Event] | None:
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


class ResponseEngine:
    def __init__(
        self,
        res: Resources,
        outbox: BillingOutbox,
        admission: AdmissionControl | None = None,
        worker_silence_s: float = 30.0,
    ) -> None:
        self.res = res
        self.worker_silence_s = worker_silence_s
        self.outbox = outbox
        self.admission = admission
        self._tasks: set[asyncio.Task[None]] = set()
        self.background = BackgroundResponses()
        self.live = LiveResponses()

    async def prepare(
        self, request: CreateRequest, ctx: RequestContext, pipeline: Pipeline
    ) -> Prepared:
        prepared = Prepared(request, ctx, new_id("resp"))
        ctx.span.set_attribute("turnpike.response.id", prepared.response_id)
        ctx.span.set_attribute("turnpike.transport", ctx.transport)
        if request.safety_identifier:  # who the end user is, for abuse investigations
            ctx.span.set_attribute("turnpike.safety_identifier", request.safety_identifier)
        turn_metrics.response_started(ctx)
        try:
            self._open_sealed(request, ctx.tenant)
            await read_pdfs(request.input_items, self.res.pdf)
            await pipeline.prepare(prepared, self.res)
        except BaseException as err:
            model = prepared.model.id if prepared.model is not None else None
            turn_metrics.response_refused(ctx, model, err)
            # The admission slot is the caller's to give back (AdmissionControl.hold).
            # The client gets an error, not a response: the cached parent cannot be
            # trusted to match what the client will send next.
            if (
                isinstance(err, ApiError)
                and ctx.connection_cache is not None
                and request.previous_response_id
            ):
                ctx.connection_cache.evict_after_failure(request.previous_response_id, ctx.lane)
            raise
        assert prepared.model is not None
        prepared.response = new_response(
            prepared.response_id, request, prepared.model.id, prepared.safety_flags or ()
        )
        prompt = prepared.prompt
        if prompt is not None and prompt.truncated:  # say what truncation dropped
            prepared.response[TIMINGS_KEY] = {
                TRUNCATION_KEY: {
                    "dropped_items": list(prompt.dropped_ids),
                    "input_tokens_before": prompt.untruncated_tokens,
                }
            }
        prepared.policy = pipeline.policy
        return prepared

    # Generation ------------------------------------------------------------
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
        with trace.use_span(span, end_on_exit=False):
            task = asyncio.create_task(
                self._drive(prepared, queue), name=f"response {queue.response_id}"
            )
        # The task owns the admission slot from here: _finish gives it back, or, for a
        # task cancelled before it ran (shutdown), _after_task.
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

    async def _drive(self, prepared: Prepared, queue: ResponseEventQueue) -> None:
        assert prepared.response is not None
        events = ResponseEvents(prepared.response)
        if encrypted_reasoning.INCLUDE in prepared.request.include:
            sealer, tenant = self.res.sealer, prepared.ctx.tenant
            events.seal_reasoning = lambda text: encrypted_reasoning.seal(sealer, tenant, text)
        generation = Generation(prepared.route)
        terminal: list[Event] = []
        try:
            queue.emit(events.created())
            if prepared.request.store:
                await self._store(prepared)
            queue.emit(events.in_progress())
            for event in self._compact_if_over(prepared, events):
                queue.emit(event)
            if prepared.request.compact_now:  # the compaction item is the whole answer
                assert prepared.prompt is not None
                compacted = len(prepared.prompt.tokens) + (prepared.image_tokens or 0)
                terminal = [events.completed(usage(compacted, 0, 0))]
            elif not prepared.request.generate:
                terminal = [events.completed(usage(0, 0, 0))]
            else:
                generate = self._generate(prepared, generation, events, queue)
                running = self.background.running(prepared.ctx.tenant, prepared.response_id)
                with prepared.ctx.stage("generate"):
                    if running is None:
                        done = await _unless_abandoned(generate, queue)
                    else:
                        done = await self.background.generate(running, generate)
                    if done is not None:
                        terminal = done
                    else:
                        assert prepared.prompt is not None
                        prompt_tokens = len(prepared.prompt.tokens) + (prepared.image_tokens or 0)
                        terminal = events.cancelled(
                            usage(prompt_tokens, 0, generation.output_tokens)
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
            await self._finish(prepared, events, generation, terminal, queue)

    def _compact_if_over(self, prepared: Prepared, events: ResponseEvents) -> list[Event]:
        """``context_management`` compaction: past the threshold, the whole conversation
        so far (history and input) sealed into one compaction item, first in the output.
        A client sends it, and the output after it, instead of the history."""
        threshold = prepared.request.compact_threshold
        if prepared.prompt is None or prepared.conversation is None:
            return []
        # A compaction_trigger item compacts whatever the size (turnpike.gateway.sealed.compaction).
        if not prepared.request.compact_now and (
            threshold is None
            or len(prepared.prompt.tokens) + (prepared.image_tokens or 0) <= threshold
        ):
            return []
        items = [*prepared.conversation.history, *prepared.request.input_items]
        item = compaction.seal_items(self.res.sealer, prepared.ctx.tenant, items)
        return events.add_item(item)

    async def _generate(
        self,
        prepared: Prepared,
        generation: Generation,
        events: ResponseEvents,
        queue: ResponseEventQueue,
    ) -> list[Event]:
        request, model, prompt = prepared.request, prepared.model, prepared.prompt
        assert model is not None and prompt is not None and prepared.conversation is not None
        gen_request = inference_pb2.GenerateRequest(
            request_id=prepared.response_id,
            model=model.id,
            prompt=token_bytes.pack(prompt.tokens),
            instructions=request.instructions or "",
            items=prompt.kept_items if prompt.truncated else prepared.conversation.items,
            tools=request.callable_proto_tools,
            tool_choice=request.tool_choice_name(),
            parallel_tool_calls=request.parallel_tool_calls,
            max_tool_calls=request.max_tool_calls,
            verbosity=request.verbosity,
            sampling=inference_pb2.SamplingParams(
                temperature=request.temperature,
                top_p=request.top_p,
                max_output_tokens=request.max_output_tokens or 0,
                seed=request.seed or 0,
                presence_penalty=request.presence_penalty,
                frequency_penalty=request.frequency_penalty,
            ),
            tokens_per_second=model.tokens_per_second,
            ttft_ms=model.ttft_ms,
            prefill_tokens_per_second=model.prefill_tokens_per_second,
            backend=model.backend,
            # On the legacy path the imageres proxy resolves the images and sets this.
            image_tokens=prepared.image_tokens or 0,
            text_format=request.proto_text_format,
            reasoning_effort=(request.reasoning or {}).get("effort") or "",
            reasoning_summary=(request.reasoning or {}).get("summary") or "",
            tenant=prepared.ctx.tenant,  # scopes the worker's prefix cache
        )
        excluded: list[str] = []
        for attempt in range(MAX_WORKER_ATTEMPTS):
            route = generation.route
            assert route is not None
            started = False
            stream = self._worker_stream(prepared, route, gen_request)
            try:
                async for event in worker_events(stream, self.worker_silence_s):
                    started = True
                    kind = event.WhichOneof("event")
                    if kind == "item_started":
                        if event.item_started.kind == inference_pb2.ItemStarted.FUNCTION_CALL:
                            started_call = event.item_started
                            tool = request.called_tool(started_call.name) or {}
                            for e in events.start_function_call(
                                started_call.call_id,
                                started_call.name,
                                tool.get("namespace"),
                                custom=started_call.custom,
                            ):
                                queue.emit(e)
                        elif event.item_started.kind == inference_pb2.ItemStarted.REASONING:
                            for e in events.start_reasoning():
                                queue.emit(e)
                        else:
                            for e in events.start_message():
                                queue.emit(e)
                    elif kind == "delta" and event.delta.summary:
                        for e in events.summary(event.delta.text):
                            queue.emit(e)
                    elif kind == "delta":
                        turn_metrics.first_token(prepared.ctx)
                        generation.output_tokens += event.delta.tokens
                        text = event.delta.text
                        if queue.merge_delta(events.open_item_id, text):
                            events.extend_delta(text)
                        else:
                            queue.emit(events.delta(text))
                    elif kind == "item_done":
                        for e in events.finish_item():
                            queue.emit(e)
                    elif kind == "finished":
                        return self._finished(prepared, generation, events, event.finished)
                    elif kind == "error":
                        return events.failed(
                            event.error.code or "server_error",
                            f"The model failed: {event.error.message}",
                        )
                    if request.background and kind in ("item_started", "item_done"):
                        await self._store(prepared)  # a poll sees the output so far
                return events.failed("server_error", "The model stream ended unexpectedly.")
            except (grpc.aio.AioRpcError, WorkerSilentError) as err:
                # A silent worker is as good as an unavailable one: another may serve.
                code = err.code() if isinstance(err, grpc.aio.AioRpcError) else None
                reason = code.name.lower() if code is not None else str(err)
                retry = (
                    not started
                    and code in (None, grpc.StatusCode.UNAVAILABLE)
                    and attempt + 1 < MAX_WORKER_ATTEMPTS
                )
                log.warning(
                    "worker %s failed (%s); %s",
                    route.worker_id,
                    reason,
                    "rerouting" if retry else "failing the response",
                )
                if not retry:
                    return events.failed(
                        "server_error",
                        f"The inference worker failed while generating ({reason}).",
                    )
                excluded.append(route.worker_id)
                try:
                    generation.route = await pick_worker(
                        self.res.backends,
                        model.id,
                        prepared.conversation.affinity_key,
                        len(prompt.tokens),
                        exclude=excluded,
                    )
                except ApiError as api_err:
                    return events.failed("server_error", api_err.message)
        return events.failed("server_error", "No inference worker could serve the response.")

    def _worker_stream(
        self,
        prepared: Prepared,
        route: router_pb2.RouteDecision,
        gen_request: inference_pb2.GenerateRequest,
    ):
        assert prepared.policy is not None
        backends = self.res.backends
        if prepared.policy.worker_via_imageres:
            return backends.imageres.ProxyGenerate(
                imageres_pb2.ProxyGenerateRequest(
                    worker_address=route.worker_address, request=gen_request
                )
            )
        return backends.worker(route.worker_address).Generate(gen_request)

    def _finished(
        self,
        prepared: Prepared,
        generation: Generation,
        events: ResponseEvents,
        finished: inference_pb2.Finished,
    ) -> list[Event]:
        t = finished.timings
        generation.model_ms = {
            "queue_ms": t.queue_ms,
            "prefill_ms": t.prefill_ms,
            "decode_ms": t.decode_ms,
            "ttft_ms": t.ttft_ms,
            "total_ms": t.total_ms,
        }
        generation.worker_id = finished.worker_id
        u = finished.usage
        assert prepared.prompt is not None
        # The backend's count is authoritative (images, a hosted model's own tokenizer).
        use = usage(
            u.input_tokens or len(prepared.prompt.tokens),
            u.cached_tokens,
            u.output_tokens,
            u.reasoning_tokens,
        )
        self._annotate(prepared, generation)
        if finished.finish_reason == "length":
            return events.incomplete("max_output_tokens", use)
        return [events.completed(use)]

    @staticmethod
    def _annotate(prepared: Prepared, generation: Generation) -> None:
        """Model time as the worker reports it, and each API stage's own time, so a
        client can tell model time from API time for every response."""
        assert prepared.response is not None
        prepared.response.setdefault(TIMINGS_KEY, {}).update(
            {
                "pipeline": prepared.ctx.pipeline,
                "worker_id": generation.worker_id,
                "model_ms": {k: round(v, 3) for k, v in generation.model_ms.items()},
                "stages_ms": {k: round(v, 3) for k, v in prepared.ctx.stage_ms.items()},
            }
        )

    async def _finish(
        self,
        prepared: Prepared,
        events: ResponseEvents,
        generation: Generation,
        terminal: list[Event],
        queue: ResponseEventQueue,
    ) -> None:
        """Store, cache and bill before the terminal event leaves: a client that
        continues right after it must find its parent. A response the store could not
        keep ends failed (service_unavailable), never completed: a client must not continue
        from what the store does not hold. What was generated is billed either way."""
        response, ctx, request, policy = (
            prepared.response,
            prepared.ctx,
            prepared.request,
            prepared.policy,
        )
        assert response is not None and policy is not None
        use = response.get("usage") or {}  # what was generated, whatever the ending
        # Deleted while it ran: billed, but neither stored (_store) nor continued from.
        deleted = self.live.is_deleted(ctx.tenant, response["id"])
        try:
            with ctx.stage("finalize"):
                finished_ok = response["status"] in ("completed", "incomplete")
                stored = True
                if request.store:
                    try:
                        await self._store(prepared)
                    except StoreUnavailable as err:
                        log.warning("storing response %s failed: %s", response["id"], err)
                        stored = False
                if response["usage"] and request.generate:
                    await self._bill(prepared)
                if finished_ok and not stored:
                    terminal[-1:] = events.failed(
                        "service_unavailable", store_unavailable().message
                    )
                    finished_ok = False
                continuable = finished_ok and not deleted
                cache = ctx.connection_cache
                # A truncated render covers only the items left: nothing may append to it.
                prompt = prepared.prompt
                whole = prompt is not None and not prompt.truncated
                if continuable and policy.keep_rendered_tokens and whole:
                    assert prompt is not None  # whole says so
                    self.res.token_cache.put(ctx.tenant, response["id"], prompt.rendered)
                if continuable and cache is not None:
                    cache.put(response["id"], self._next_state(prepared, generation))
                elif cache is not None and request.previous_response_id:
                    cache.evict_after_failure(request.previous_response_id, ctx.lane)
                if finished_ok and request.conversation:  # the turn joins its conversation
                    turn = [*request.input_items, *response["output"]]
                    # The output may take it past its bounds (turnpike.gateway.state.conversation_bounds).
                    await self.res.conversations.append(
                        ctx.tenant, request.conversation, turn, exempt=len(response["output"])
                    )
        except Exception:
            log.exception("finalizing response %s failed", response["id"])
        self._stamp_overhead(prepared, generation, terminal)
        await self._release(ctx, use.get("input_tokens", 0) + use.get("output_tokens", 0))
        end_response_span(ctx.span, response)
        queue.final = response
        for event in terminal:
            queue.emit(event)
        queue.close()
        self.background.finished(ctx.tenant, response["id"], response)
        self.live.finished(ctx.tenant, response["id"])

    async def _release(self, ctx: RequestContext, used_tokens: int) -> None:
        if self.admission is not None:
            await self.admission.release(ctx.admission, used_tokens)

    def _after_task(self, prepared: Prepared) -> None:
        """What _finish does not do when the task never ran it."""
        ctx = prepared.ctx
        self.live.finished(ctx.tenant, prepared.response_id)
        if ctx.admission is not None and not ctx.admission.released:
            task = asyncio.get_running_loop().create_task(self._release(ctx, 0))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _stamp_overhead(prepared: Prepared, generation: Generation, terminal: list[Event]) -> None:
        """Record the finished turn, and give its terminal event the API overhead (the
        same figure as the HTTP header), once everything before that event is done."""
        response = prepared.response
        assert response is not None
        model_ms = generation.model_ms.get("total_ms", 0.0)
        overhead = turn_metrics.response_finished(prepared, model_ms, time.perf_counter())
        timings = response.setdefault(TIMINGS_KEY, {})
        if "pipeline" not in timings:  # failed before the worker reported its timings
            timings.update(
                {
                    "pipeline": prepared.ctx.pipeline,
                    "worker_id": generation.worker_id,
                    "model_ms": {},
                    "stages_ms": {k: round(v, 3) for k, v in prepared.ctx.stage_ms.items()},
                }
            )
        timings["overhead_ms"] = round(overhead, 3)
        if (first := prepared.ctx.first_token_at) is not None:  # as the client saw it
            timings["ttft_ms"] = round((first - prepared.ctx.started) * 1000, 3)
        for event in terminal:
            if (snapshot := event.get("response")) is not None:
                snapshot[TIMINGS_KEY] = timings

    async def _bill(self, prepared: Prepared) -> None:
        response, ctx, policy = prepared.response, prepared.ctx, prepared.policy
        assert response is not None and policy is not None
        use = response["usage"]
        event = billing_pb2.UsageEvent(
            event_id=response["id"],
            tenant=ctx.tenant,
            model=response["model"],
            input_tokens=use["input_tokens"],
            cached_tokens=use["input_tokens_details"]["cached_tokens"],
            output_tokens=use["output_tokens"],
            created_at=response["created_at"],
        )
        # Delivered later, billing links to the response's span.
        link = ctx.span.get_span_context()
        if policy.billing_before_terminal:
            await self.outbox.record_now(event, link)
        else:
            await self.outbox.submit(event, link)

    @staticmethod
    def _next_state(prepared: Prepared, generation: Generation) -> ConversationState:
        response, conversation, prompt = prepared.response, prepared.conversation, prepared.prompt
        assert response is not None and conversation is not None
        output = response["output"]
        call_names = conversation.call_names
        return ConversationState(
            response=response,
            history=[*conversation.history, *prepared.request.input_items, *output],
            proto_history=conversation.items + to_proto(output, call_names),
            call_names=call_names,
            conversation_id=conversation.conversation_id,
            affinity_key=conversation.affinity_key,
            rendered=prompt.rendered if prompt is not None and not prompt.truncated else None,
            model=prepared.model,
            route=generation.route,
            lane=prepared.ctx.lane,
            image_tokens=prepared.image_tokens or 0,
            history_bytes=conversation_bounds.bytes_after(
                prepared.parent.state.history_bytes if prepared.parent is not None else 0,
                prepared.request.input_items,
                output,
            ),
        )

    async def _store(self, prepared: Prepared) -> None:
        assert prepared.response is not None and prepared.conversation is not None
        if self.live.is_deleted(prepared.ctx.tenant, prepared.response_id):
            return
        await self.res.store.put(
            StoredResponse(
                prepared.ctx.tenant,
                prepared.response,
                prepared.request.input_items,
                prepared.conversation.affinity_key,
            )
        )

    # Other endpoints -------------------------------------------------------
    async def count_input_tokens(self, request: CreateRequest, tenant: str) -> int:
        """The prompt tokens ``request`` would have: its conversation rendered in full,
        and its images (as generation and billing count them)."""
        return (await self._full_conversation(request, tenant))[1]

    async def compact(self, request: CreateRequest, tenant: str) -> tuple[list[Item], int]:
        """``POST /v1/responses/compact``: the request's whole history (its parent's and
        its input) compacted (``turnpike.gateway.sealed.compaction``), and the prompt tokens it renders to."""
        items, tokens = await self._full_conversation(request, tenant)
        return compaction.compact(self.res.sealer, tenant, items), tokens

    def _open_sealed(self, request: CreateRequest, tenant: str) -> None:
        """What the server sealed for the client, opened before any stage sees the input:
        compaction items become the items they hold, reasoning items get their text."""
        request.input_items = compaction.expand(self.res.sealer, tenant, request.input_items)
        encrypted_reasoning.open_items(self.res.sealer, tenant, request.input_items)

    async def _full_conversation(
        self, request: CreateRequest, tenant: str
    ) -> tuple[list[Item], int]:
        """Every item of the request's conversation (its parent's, then its input,
        compaction items expanded) and the prompt tokens they render to."""
        self._open_sealed(request, tenant)
        await read_pdfs(request.input_items, self.res.pdf)
        parent = None
        if request.previous_response_id:
            parent = await load_parent(self.res.store, tenant, request.previous_response_id)
        elif request.conversation:
            parent = await load_stored_conversation(
                self.res.conversations, tenant, request.conversation
            )
        conversation = join_conversation(parent, request, tenant, response_id="")
        rendered = await render_all(self.res, request, conversation.items)
        images = await image_tokens(conversation.items, self.res.image_limits)
        history = parent.history if parent is not None else []
        return [*history, *request.input_items], len(rendered.prompt()) + images

    async def input_items(self, tenant: str, response_id: str) -> list[Item] | None:
        """Every input item the response was generated from, oldest first."""
        chain = await load_chain(self.res.store, tenant, response_id)
        if chain is None:
            # An ancestor was deleted: what is left is this response's own input.
            record = await self.res.store.get(tenant, response_id)
            return None if record is None else list(record.input_items)
        return [*history_of(chain[:-1]), *chain[-1].input_items]
