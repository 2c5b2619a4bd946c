"""The transport-independent core: one create request in, a stream of
Responses events out. HTTP JSON, SSE and WebSocket are thin adapters over it.

``prepare`` runs the pipeline's stages (``gateway.pipelines``) and raises ``ApiError``
for anything the client must fix, so transports can still answer with a plain
error. ``start`` then drives generation in a task of its own: the response is
stored, cached and billed even when the client goes away mid-stream.
"""

from __future__ import annotations

import asyncio
import logging

import grpc
from opentelemetry import trace
from turnpike.billing.v1 import billing_pb2
from turnpike.conversation.v1 import conversation_pb2
from turnpike.ids import new_id
from turnpike.imageres.v1 import imageres_pb2
from turnpike.inference.v1 import inference_pb2

from gateway.backends import Backends
from gateway.billing_outbox import BillingOutbox
from gateway.caches import ModelConfigCache, TokenCache
from gateway.errors import ApiError
from gateway.events import Event, ResponseEvents
from gateway.items import Item, check_call_outputs, to_proto
from gateway.request import CreateRequest
from gateway.request_state import Prepared, RequestContext
from gateway.response_object import usage
from gateway.run import ResponseRun
from gateway.stages import (
    LoadConversation,
    Resources,
    image_tokens,
    pick_worker,
    render_request,
)
from gateway.state import ConversationState
from gateway.store import ResponseStore, StoredResponse, history_of
from gateway.tracing import end_response_span

log = logging.getLogger(__name__)

# How many workers a generation may try before it fails (connection refused only).
MAX_WORKER_ATTEMPTS = 3
# Vendor extension on the response object: where the time went (see _annotate).
TIMINGS_KEY = "turnpike"


class ResponseEngine:
    def __init__(
        self,
        backends: Backends,
        store: ResponseStore,
        outbox: BillingOutbox,
        timeout_s: float,
        model_cache_ttl_s: float = 30.0,
        token_cache_tokens: int = 20_000_000,
    ) -> None:
        self.backends = backends
        self.store = store
        self.outbox = outbox
        self._tasks: set[asyncio.Task[None]] = set()
        self.res = Resources(
            backends,
            store,
            timeout_s,
            ModelConfigCache(model_cache_ttl_s),
            TokenCache(token_cache_tokens),
        )

    async def prepare(self, request: CreateRequest, ctx: RequestContext) -> Prepared:
        prepared = Prepared(request, ctx, new_id("resp"))
        ctx.span.set_attribute("turnpike.response.id", prepared.response_id)
        try:
            for step in ctx.pipeline.stages:
                await step.perform(prepared, self.res)
        except ApiError:
            # The client gets an error, not a response: the cached parent cannot be
            # trusted to match what the client will send next.
            if ctx.connection_cache is not None and request.previous_response_id:
                ctx.connection_cache.evict_after_failure(request.previous_response_id, ctx.lane)
            raise
        return prepared

    # Generation ------------------------------------------------------------
    def start(self, prepared: Prepared) -> ResponseRun:
        run = ResponseRun(prepared.response["id"])
        span = prepared.ctx.span
        span.set_attribute("turnpike.model", prepared.model.id)
        # The task runs in a copy of the current context: generation, and the
        # finishing that ends the span, happen inside the response's span.
        with trace.use_span(span, end_on_exit=False):
            task = asyncio.create_task(
                self._drive(prepared, run), name=f"response {run.response_id}"
            )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return run

    async def drain(self, timeout: float) -> None:
        """Let responses in flight finish (graceful shutdown)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)

    async def _drive(self, prepared: Prepared, run: ResponseRun) -> None:
        events = ResponseEvents(prepared.response)
        ctx = prepared.ctx
        terminal: list[Event] = []
        try:
            run.emit(events.created())
            if prepared.request.store:
                await self._store(prepared)
            run.emit(events.in_progress())
            if not prepared.request.generate:
                terminal = [events.completed(usage(0, 0, 0))]
            else:
                with ctx.stage("generate"):
                    terminal = await self._generate(prepared, events, run)
        except Exception:
            log.exception("response %s failed", run.response_id)
            terminal = events.failed(
                "server_error", "The server had an error while generating the response."
            )
        finally:
            await self._finish(prepared, terminal, run)

    async def _generate(
        self, prepared: Prepared, events: ResponseEvents, run: ResponseRun
    ) -> list[Event]:
        request = prepared.request
        gen_request = inference_pb2.GenerateRequest(
            request_id=prepared.response["id"],
            model=prepared.model.id,
            prompt_tokens=prepared.prompt,
            instructions=request.instructions or "",
            items=prepared.proto_history,
            tools=request.proto_tools,
            tool_choice=request.tool_choice_name(),
            parallel_tool_calls=request.parallel_tool_calls,
            sampling=inference_pb2.SamplingParams(
                temperature=request.temperature,
                top_p=request.top_p,
                max_output_tokens=request.max_output_tokens or 0,
                seed=request.seed or 0,
            ),
            tokens_per_second=prepared.model.tokens_per_second,
            ttft_ms=prepared.model.ttft_ms,
            prefill_tokens_per_second=prepared.model.prefill_tokens_per_second,
            backend=prepared.model.backend,
            # On the legacy path the imageres proxy resolves the images and sets this.
            image_tokens=prepared.image_tokens,
        )
        excluded: list[str] = []
        for attempt in range(MAX_WORKER_ATTEMPTS):
            route = prepared.route
            started = False
            try:
                async for event in self._worker_stream(prepared, gen_request):
                    started = True
                    kind = event.WhichOneof("event")
                    if kind == "item_started":
                        if event.item_started.kind == inference_pb2.ItemStarted.FUNCTION_CALL:
                            for e in events.start_function_call(
                                event.item_started.call_id, event.item_started.name
                            ):
                                run.emit(e)
                        else:
                            for e in events.start_message():
                                run.emit(e)
                    elif kind == "delta":
                        text = event.delta.text
                        if run.merge_delta(events.open_item_id, text):
                            events.extend_delta(text)
                        else:
                            run.emit(events.delta(text))
                    elif kind == "item_done":
                        for e in events.finish_item():
                            run.emit(e)
                    elif kind == "finished":
                        return self._finished(prepared, events, event.finished)
                    elif kind == "error":
                        return events.failed(
                            event.error.code or "server_error",
                            f"The model failed: {event.error.message}",
                        )
                return events.failed("server_error", "The model stream ended unexpectedly.")
            except grpc.aio.AioRpcError as err:
                retry = (
                    not started
                    and err.code() == grpc.StatusCode.UNAVAILABLE
                    and attempt + 1 < MAX_WORKER_ATTEMPTS
                )
                log.warning(
                    "worker %s failed (%s); %s",
                    route.worker_id,
                    err.code(),
                    "rerouting" if retry else "failing the response",
                )
                if not retry:
                    return events.failed(
                        "server_error",
                        f"The inference worker failed while generating ({err.code().name.lower()}).",
                    )
                excluded.append(route.worker_id)
                try:
                    prepared.route = await pick_worker(prepared, self.res, exclude=excluded)
                except ApiError as api_err:
                    return events.failed("server_error", api_err.message)
        return events.failed("server_error", "No inference worker could serve the response.")

    def _worker_stream(self, prepared: Prepared, gen_request: inference_pb2.GenerateRequest):
        route = prepared.route
        if prepared.ctx.pipeline.image_hop:
            return self.backends.imageres.ProxyGenerate(
                imageres_pb2.ProxyGenerateRequest(
                    worker_address=route.worker_address, request=gen_request
                )
            )
        return self.backends.worker(route.worker_address).Generate(gen_request)

    def _finished(
        self, prepared: Prepared, events: ResponseEvents, finished: inference_pb2.Finished
    ) -> list[Event]:
        t = finished.timings
        prepared.model_timings = {
            "queue_ms": t.queue_ms,
            "prefill_ms": t.prefill_ms,
            "decode_ms": t.decode_ms,
            "ttft_ms": t.ttft_ms,
            "total_ms": t.total_ms,
        }
        prepared.worker_id = finished.worker_id
        u = finished.usage
        # The backend's count is authoritative (images, a hosted model's own tokenizer).
        use = usage(u.input_tokens or len(prepared.prompt), u.cached_tokens, u.output_tokens)
        self._annotate(prepared)
        if finished.finish_reason == "length":
            return events.incomplete("max_output_tokens", use)
        return [events.completed(use)]

    @staticmethod
    def _annotate(prepared: Prepared) -> None:
        """Model time as the worker reports it, and each API stage's own time, so a
        client can tell model time from API time for every response."""
        prepared.response[TIMINGS_KEY] = {
            "pipeline": prepared.ctx.pipeline.name,
            "worker_id": prepared.worker_id,
            "model_ms": {k: round(v, 3) for k, v in prepared.model_timings.items()},
            "stages_ms": {k: round(v, 3) for k, v in prepared.ctx.stage_ms.items()},
        }

    async def _finish(self, prepared: Prepared, terminal: list[Event], run: ResponseRun) -> None:
        """Cache, store and bill before the terminal event leaves: a client that
        continues right after it must find its parent."""
        response = prepared.response
        ctx = prepared.ctx
        try:
            with ctx.stage("finalize"):
                finished_ok = response["status"] in ("completed", "incomplete")
                if finished_ok and ctx.pipeline.cache_rendered_tokens and prepared.rendered:
                    self.res.token_cache.put(ctx.tenant, response["id"], prepared.rendered)
                if finished_ok and ctx.connection_cache is not None:
                    ctx.connection_cache.put(response["id"], self._next_state(prepared))
                elif ctx.connection_cache is not None and prepared.request.previous_response_id:
                    ctx.connection_cache.evict_after_failure(
                        prepared.request.previous_response_id, ctx.lane
                    )
                if prepared.request.store:
                    await self._store(prepared)
                if response["usage"] and prepared.request.generate:
                    event = billing_pb2.UsageEvent(
                        event_id=response["id"],
                        tenant=ctx.tenant,
                        model=response["model"],
                        input_tokens=response["usage"]["input_tokens"],
                        cached_tokens=response["usage"]["input_tokens_details"]["cached_tokens"],
                        output_tokens=response["usage"]["output_tokens"],
                        created_at=response["created_at"],
                    )
                    # Delivered later, billing links to the response's span.
                    link = ctx.span.get_span_context()
                    if ctx.pipeline.blocking_billing:
                        await self.outbox.record_now(event, link)
                    else:
                        self.outbox.submit(event, link)
        except Exception:
            log.exception("finalizing response %s failed", response["id"])
        end_response_span(ctx.span, response)
        run.final = response
        for event in terminal:
            run.emit(event)
        run.close()

    def _next_state(self, prepared: Prepared) -> ConversationState:
        output = prepared.response["output"]
        call_names = prepared.call_names
        proto_output = to_proto(output, call_names)
        return ConversationState(
            response=prepared.response,
            history=[*prepared.history, *prepared.request.input_items, *output],
            proto_history=prepared.proto_history + proto_output,
            call_names=call_names,
            conversation_id=prepared.conversation_id,
            affinity_key=prepared.affinity_key,
            rendered=prepared.rendered,
            model=prepared.model,
            route=prepared.route,
            lane=prepared.ctx.lane,
            image_tokens=prepared.image_tokens,
        )

    async def _store(self, prepared: Prepared) -> None:
        await self.store.put(
            StoredResponse(
                prepared.ctx.tenant,
                prepared.response,
                prepared.request.input_items,
                prepared.affinity_key,
            )
        )

    # Other endpoints -------------------------------------------------------
    async def count_input_tokens(self, request: CreateRequest, ctx: RequestContext) -> int:
        history: list[Item] = []
        proto_history: list[conversation_pb2.Item] = []
        call_names: dict[str, str] = {}
        if request.previous_response_id:
            load = ctx.pipeline.stage(LoadConversation)
            parent = await load.load(request.previous_response_id, ctx, self.res)
            history, proto_history = parent.history, parent.proto_history
            call_names = dict(parent.call_names)
        check_call_outputs(history, request.input_items)
        items = proto_history + to_proto(request.input_items, call_names)
        reply = await self.res.tokenize(
            self.backends.tokenizer.Render, render_request(request, items)
        )
        # Images are prompt tokens too (as generation and billing count them).
        return len(reply.tokens) + len(reply.completion_prompt) + await image_tokens(items)

    async def input_items(self, tenant: str, response_id: str) -> list[Item] | None:
        """Every input item the response was generated from, oldest first."""
        chain = await self.store.chain(tenant, response_id)
        if chain is None:
            # An ancestor was deleted: what is left is this response's own input.
            record = await self.store.get(tenant, response_id)
            return None if record is None else list(record.input_items)
        return [*history_of(chain[:-1]), *chain[-1].input_items]
