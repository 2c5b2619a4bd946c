"""The transport-independent core: one create request in, a stream of
Responses events out. HTTP JSON, SSE and WebSocket are thin adapters over it.

``prepare`` runs every stage before generation and raises ``ApiError`` for
anything the client must fix, so transports can still answer with a plain
error. ``start`` then drives generation in a task of its own: the response is
stored, cached and billed even when the client goes away mid-stream.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from array import array
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from imageres.resolve import Limits, resolve_image
from opentelemetry import trace
from turnpike.billing.v1 import billing_pb2
from turnpike.config import ImageresSettings
from turnpike.conversation.v1 import conversation_pb2
from turnpike.ids import new_id
from turnpike.imageres.v1 import imageres_pb2
from turnpike.inference.v1 import inference_pb2
from turnpike.router.v1 import router_pb2
from turnpike.safety.v1 import safety_pb2
from turnpike.tokenizer.v1 import tokenizer_pb2

from gateway.backends import Backends
from gateway.billing_outbox import BillingOutbox
from gateway.caches import ModelConfigCache, TokenCache
from gateway.errors import ApiError, invalid, unavailable
from gateway.events import Event, ResponseEvents
from gateway.items import Item, check_call_outputs, to_proto
from gateway.pipelines import Pipeline
from gateway.request import CreateRequest
from gateway.response_object import new_response, usage
from gateway.run import ResponseRun
from gateway.state import ConnectionCache, ConversationState, RenderedPrefix
from gateway.store import ResponseStore, StoredResponse, history_of
from gateway.tracing import end_response_span

log = logging.getLogger(__name__)
tracer = trace.get_tracer("turnpike.gateway")

# How many workers a generation may try before it fails (connection refused only).
MAX_WORKER_ATTEMPTS = 3
# Where a safety flag is recorded on the response (besides its trace).
SAFETY_METADATA_KEY = "turnpike_safety_flags"
# Vendor extension on the response object: where the time went (see _annotate).
TIMINGS_KEY = "turnpike"
_imageres = ImageresSettings()
IMAGE_LIMITS = Limits(_imageres.max_image_bytes, _imageres.max_image_pixels)


@dataclass
class RequestContext:
    tenant: str
    pipeline: Pipeline
    connection_cache: ConnectionCache | None = None
    lane: str | None = None  # WebSocket stream_id
    stage_ms: dict[str, float] = field(default_factory=dict)
    # The response's own span (gateway.tracing.response_span); _finish ends it.
    span: trace.Span = trace.INVALID_SPAN

    @contextmanager
    def stage(self, name: str):
        """Time a stage and give it a span, so one trace shows where time went."""
        start = time.perf_counter()
        with tracer.start_as_current_span(f"stage.{name}") as span:
            span.set_attribute("turnpike.pipeline", self.pipeline.name)
            yield span
        self.stage_ms[name] = self.stage_ms.get(name, 0.0) + (time.perf_counter() - start) * 1000


@dataclass
class Prepared:
    request: CreateRequest
    ctx: RequestContext
    response: dict[str, Any]
    history: list[Item]
    proto_history: list[conversation_pb2.Item]
    call_names: dict[str, str]
    conversation_id: str
    affinity_key: str
    prompt: list[int] = field(default_factory=list)
    rendered: RenderedPrefix | None = None
    model: router_pb2.ModelConfig | None = None
    route: router_pb2.RouteDecision | None = None
    # Tokens of the conversation's resolved input images (charged as prompt tokens).
    image_tokens: int = 0
    # Model-side timings reported by the worker.
    model_timings: dict[str, float] = field(default_factory=dict)
    worker_id: str = ""
    safety_flags: list[str] = field(default_factory=list)


def _rpc_unavailable(service: str, err: grpc.aio.AioRpcError) -> ApiError:
    log.warning("%s call failed: %s %s", service, err.code(), err.details())
    return unavailable(f"The {service} service is unavailable; please retry.")


def render_request(
    request: CreateRequest, items: list[conversation_pb2.Item]
) -> tokenizer_pb2.RenderRequest:
    return tokenizer_pb2.RenderRequest(
        instructions=request.instructions or "", tools=request.proto_tools(), items=items
    )


def conversation_key(
    tenant: str, request: CreateRequest, items: list[conversation_pb2.Item]
) -> str:
    """The routing key of a conversation that names no parent: the client's
    ``prompt_cache_key``, else a hash of how the conversation starts (instructions, tools,
    first item). A stateless client re-sending its history keeps landing on the worker
    that holds its prefix cache. Scoped by tenant: tenants never share a cache by routing."""
    if request.prompt_cache_key:
        return f"{tenant}:pck:{request.prompt_cache_key}"
    first = items[0].SerializeToString() if items else b""
    digest = hashlib.blake2b(header_key(request).encode() + first, digest_size=16).hexdigest()
    return f"{tenant}:conv:{digest}"


def header_key(request: CreateRequest) -> str:
    blob = json.dumps([request.instructions, request.tools], sort_keys=True).encode()
    return hashlib.blake2b(blob, digest_size=16).hexdigest()


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
        self.timeout_s = timeout_s
        self._tasks: set[asyncio.Task[None]] = set()
        self._completion_prompt = array("I")
        self.model_cache = ModelConfigCache(model_cache_ttl_s)
        self.token_cache = TokenCache(token_cache_tokens)

    # Preparation -----------------------------------------------------------
    async def prepare(self, request: CreateRequest, ctx: RequestContext) -> Prepared:
        response_id = new_id("resp")
        ctx.span.set_attribute("turnpike.response.id", response_id)
        parent = None
        if request.previous_response_id:
            with ctx.stage("load_conversation"):
                parent = await self._load_parent(request.previous_response_id, ctx)
        with ctx.stage("validate_history"):
            check_call_outputs(parent.history if parent else [], request.input_items)
        history = parent.history if parent else []
        call_names = dict(parent.call_names) if parent else {}
        proto_history = list(parent.proto_history) if parent else []
        proto_new = to_proto(request.input_items, call_names)
        with ctx.stage("resolve_model"):
            model = await self._resolve_model(request, ctx, parent)
        if request.max_output_tokens and request.max_output_tokens > model.max_output_tokens:
            raise invalid(
                f"'max_output_tokens' is {request.max_output_tokens}, above the model's limit of {model.max_output_tokens}.",
                "max_output_tokens",
                "invalid_value",
            )
        prepared = Prepared(
            request=request,
            ctx=ctx,
            response=new_response(response_id, request, model.id),
            history=history,
            proto_history=proto_history + proto_new,
            call_names=call_names,
            conversation_id=parent.conversation_id if parent else response_id,
            affinity_key=(
                parent.affinity_key if parent else conversation_key(ctx.tenant, request, proto_new)
            ),
            model=model,
        )
        checks = [("safety", self._classify), ("render", self._render)]
        if not ctx.pipeline.image_hop:
            checks.insert(1, ("resolve_images", self._resolve_images))
        await self._run_checks(prepared, parent, proto_new, checks)
        if len(prepared.prompt) > model.context_window:
            raise invalid(
                f"Your input is {len(prepared.prompt)} tokens, over the model's context window of {model.context_window}.",
                "input",
                "context_length_exceeded",
            )
        if request.generate:
            with ctx.stage("route"):
                prepared.route = await self._route(prepared, parent)
        return prepared

    async def _run_checks(self, prepared, parent, proto_new, checks) -> None:
        """Safety, image resolution and rendering: independent of one another, and all
        done before generation starts. Overlapped when the pipeline says so."""
        ctx = prepared.ctx

        async def timed(name, check) -> None:
            with ctx.stage(name):
                await check(prepared, parent, proto_new)

        if not ctx.pipeline.overlap_checks:
            for name, check in checks:
                await timed(name, check)
            return
        try:
            async with asyncio.TaskGroup() as group:
                for name, check in checks:
                    group.create_task(timed(name, check))
        except* ApiError as failed:
            # A client error from any check (a block, a bad image) answers the request.
            raise failed.exceptions[0] from None

    async def _load_parent(self, previous_id: str, ctx: RequestContext) -> ConversationState:
        if ctx.pipeline.connection_cache and ctx.connection_cache is not None:
            state = ctx.connection_cache.get(previous_id)
            if state is not None:
                state.from_cache = True
                return state
        chain = await self.store.chain(ctx.tenant, previous_id)
        if chain is None:
            raise invalid(
                f"Previous response with id '{previous_id}' not found.",
                "previous_response_id",
                "previous_response_not_found",
            )
        history = history_of(chain)
        call_names: dict[str, str] = {}
        rendered = None
        if ctx.pipeline.cache_rendered_tokens:
            rendered = self.token_cache.get(ctx.tenant, previous_id)
        return ConversationState(
            response=chain[-1].response,
            history=history,
            proto_history=to_proto(history, call_names),
            call_names=call_names,
            conversation_id=chain[0].id,
            affinity_key=chain[-1].affinity_key or chain[0].id,
            rendered=rendered,
        )

    async def _resolve_model(
        self, request: CreateRequest, ctx: RequestContext, parent: ConversationState | None
    ) -> router_pb2.ModelConfig:
        if (
            ctx.pipeline.reuse_route
            and parent is not None
            and parent.model is not None
            and request.model in (parent.model.id, *parent.model.aliases)
        ):
            return parent.model
        if ctx.pipeline.cache_model_config:
            cached = self.model_cache.get(request.model)
            if cached is not None:
                return cached
        try:
            model = await self.backends.router.ResolveModel(
                router_pb2.ResolveModelRequest(model=request.model), timeout=self.timeout_s
            )
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                raise invalid(
                    f"The model '{request.model}' does not exist or you do not have access to it.",
                    "model",
                    "model_not_found",
                ) from None
            raise _rpc_unavailable("router", err) from None
        self.model_cache.put(request.model, model)
        return model

    async def _classify(
        self,
        prepared: Prepared,
        parent: ConversationState | None,
        proto_new: list[conversation_pb2.Item],
    ) -> None:
        incremental = (
            prepared.ctx.pipeline.incremental_safety and parent is not None and parent.from_cache
        )
        request = safety_pb2.ClassifyRequest(
            tenant=prepared.ctx.tenant,
            conversation_id=prepared.conversation_id,
            mode=safety_pb2.INCREMENTAL if incremental else safety_pb2.FULL,
            fast_path=prepared.ctx.pipeline.fast_safety,
            items=proto_new if incremental else prepared.proto_history,
        )
        try:
            verdict = await self.backends.safety.Classify(request, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as err:
            raise _rpc_unavailable("safety", err) from None
        span = trace.get_current_span()
        span.set_attribute("turnpike.safety.verdict", safety_pb2.Verdict.Name(verdict.verdict))
        span.set_attribute("turnpike.safety.items_scored", verdict.items_scored)
        if verdict.verdict == safety_pb2.BLOCK:
            categories = sorted({f.category for f in verdict.findings}) or ["policy"]
            raise ApiError(
                400,
                "Your request was blocked by the safety system ("
                + ", ".join(categories)
                + "). Remove the offending content and try again.",
                code="content_policy_violation",
                param="input",
            )
        if verdict.verdict == safety_pb2.FLAG:
            # Recorded, never silently dropped: on the trace, the log and the response.
            flags = sorted({f.category for f in verdict.findings}) or ["earlier_in_conversation"]
            prepared.safety_flags = flags
            span.set_attribute("turnpike.safety.flags", flags)
            prepared.response["metadata"] = {
                **prepared.response["metadata"],
                SAFETY_METADATA_KEY: ",".join(flags)[:512],
            }
            log.info(
                "response %s flagged: %s",
                prepared.response["id"],
                ", ".join(flags),
            )

    async def _resolve_images(
        self,
        prepared: Prepared,
        parent: ConversationState | None,
        proto_new: list[conversation_pb2.Item],
    ) -> None:
        """Image resolution without the proxy hop: the same code imageres runs, here
        in process. On a connection, images already resolved are not resolved again."""
        reuse = prepared.ctx.pipeline.connection_cache and parent is not None and parent.from_cache
        known = parent.image_tokens if reuse else 0
        items = proto_new if reuse else prepared.proto_history
        images = [image for item in items for image in item.images]
        if not images:
            prepared.image_tokens = known
            return
        resolved = await asyncio.gather(
            *(
                asyncio.to_thread(resolve_image, i.url, i.file_id, i.detail, IMAGE_LIMITS)
                for i in images
            )
        )
        for index, result in enumerate(resolved):
            if result.error:
                raise invalid(
                    f"Invalid input image {index}: {result.error}.", "input", "invalid_image"
                )
        prepared.image_tokens = known + sum(r.tokens for r in resolved)

    async def _render(
        self,
        prepared: Prepared,
        parent: ConversationState | None,
        proto_new: list[conversation_pb2.Item],
    ) -> None:
        request = prepared.request
        key = header_key(request)
        cached = parent.rendered if parent is not None else None
        if prepared.ctx.pipeline.append_render and cached is not None and cached.header_key == key:
            tail = prepared.proto_history[cached.items :]
            reply = await self._tokenize(
                self.backends.tokenizer.RenderAppend, tokenizer_pb2.RenderAppendRequest(items=tail)
            )
            tokens = cached.tokens + array("I", reply.tokens)
        else:
            reply = await self._tokenize(
                self.backends.tokenizer.Render, render_request(request, prepared.proto_history)
            )
            tokens = array("I", reply.tokens)
        if reply.completion_prompt:
            self._completion_prompt = array("I", reply.completion_prompt)
        prepared.rendered = RenderedPrefix(key, tokens, len(prepared.proto_history))
        prepared.prompt = tokens + self._completion_prompt

    async def _tokenize(self, method, message) -> tokenizer_pb2.RenderResponse:
        try:
            return await method(message, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
                message = err.details() or "The input could not be rendered."
                raise invalid(message, "input") from None
            raise _rpc_unavailable("tokenizer", err) from None

    async def _route(
        self, prepared: Prepared, parent: ConversationState | None, exclude: list[str] | None = None
    ) -> router_pb2.RouteDecision:
        model = prepared.model
        assert model is not None
        if (
            not exclude
            and prepared.ctx.pipeline.reuse_route
            and parent is not None
            and parent.route is not None
            and parent.route.model.id == model.id
        ):
            return parent.route
        try:
            return await self.backends.router.Route(
                router_pb2.RouteRequest(
                    model=model.id,
                    affinity_key=prepared.affinity_key,
                    prompt_tokens=len(prepared.prompt),
                    exclude_workers=exclude or [],
                ),
                timeout=self.timeout_s,
            )
        except grpc.aio.AioRpcError as err:
            raise _rpc_unavailable("router", err) from None

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
            tools=request.proto_tools(),
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
                    prepared.route = await self._route(prepared, None, exclude=excluded)
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
                    self.token_cache.put(ctx.tenant, response["id"], prepared.rendered)
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
        call_names: dict[str, str] = {}
        if request.previous_response_id:
            parent = await self._load_parent(request.previous_response_id, ctx)
            history, call_names = parent.history, dict(parent.call_names)
        check_call_outputs(history, request.input_items)
        items = to_proto([*history, *request.input_items], call_names)
        reply = await self._tokenize(self.backends.tokenizer.Render, render_request(request, items))
        return len(reply.tokens) + len(reply.completion_prompt)

    async def input_items(self, tenant: str, response_id: str) -> list[Item] | None:
        """Every input item the response was generated from, oldest first."""
        chain = await self.store.chain(tenant, response_id)
        if chain is None:
            # An ancestor was deleted: what is left is this response's own input.
            record = await self.store.get(tenant, response_id)
            return None if record is None else list(record.input_items)
        return [*history_of(chain[:-1]), *chain[-1].input_items]
