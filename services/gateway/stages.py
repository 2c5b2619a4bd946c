"""The stages before generation, each a small object with one job.

A stage has a ``name`` (its key in ``stages_ms`` and its span, ``stage.<name>``) and an
async ``run`` that reads and fills in the request's ``Prepared`` state. Variants are
fixed at construction (``Safety(incremental=True, fast=True)``); pipelines
(``gateway.pipelines``) compose them. ``Concurrently`` groups stages that are
independent of one another and all finish before the next step starts.

A stage raises ``ApiError`` for anything the client must fix.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from array import array
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import grpc
from imageres.resolve import Limits, resolve_image
from opentelemetry import trace
from turnpike.config import ImageresSettings
from turnpike.conversation.v1 import conversation_pb2
from turnpike.router.v1 import router_pb2
from turnpike.safety.v1 import safety_pb2
from turnpike.tokenizer.v1 import tokenizer_pb2

from gateway.backends import Backends
from gateway.caches import ModelConfigCache, TokenCache
from gateway.errors import ApiError, invalid, unavailable
from gateway.items import check_call_outputs, normalize_input, to_proto
from gateway.request import CreateRequest
from gateway.request_state import Prepared, RequestContext
from gateway.response_object import new_response
from gateway.state import ConversationState, RenderedPrefix
from gateway.store import ResponseStore, history_of

log = logging.getLogger(__name__)

# Where a safety flag is recorded on the response (besides its trace).
SAFETY_METADATA_KEY = "turnpike_safety_flags"
_imageres = ImageresSettings()
IMAGE_LIMITS = Limits(_imageres.max_image_bytes, _imageres.max_image_pixels)


@dataclass
class Resources:
    """What stages share across requests: backend clients, the store, the caches."""

    backends: Backends
    store: ResponseStore
    timeout_s: float
    model_cache: ModelConfigCache
    token_cache: TokenCache
    # The tokens that open the assistant's turn, as the tokenizer last sent them.
    completion_prompt: array = field(default_factory=lambda: array("I"))

    async def tokenize(
        self, method: Callable[..., Awaitable[tokenizer_pb2.RenderResponse]], request: Any
    ) -> tokenizer_pb2.RenderResponse:
        try:
            return await method(request, timeout=self.timeout_s)
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
                message = err.details() or "The input could not be rendered."
                raise invalid(message, "input") from None
            raise rpc_unavailable("tokenizer", err) from None


def rpc_unavailable(service: str, err: grpc.aio.AioRpcError) -> ApiError:
    log.warning("%s call failed: %s %s", service, err.code(), err.details())
    return unavailable(f"The {service} service is unavailable; please retry.")


def render_request(
    request: CreateRequest, items: list[conversation_pb2.Item]
) -> tokenizer_pb2.RenderRequest:
    return tokenizer_pb2.RenderRequest(
        instructions=request.instructions or "", tools=request.proto_tools, items=items
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
    first = content_bytes(items[0]) if items else b""
    digest = hashlib.blake2b(header_key(request).encode() + first, digest_size=16).hexdigest()
    return f"{tenant}:conv:{digest}"


def content_bytes(item: conversation_pb2.Item) -> bytes:
    """An item by content only: one sent without an id gets a new id on every request."""
    bare = conversation_pb2.Item()
    bare.CopyFrom(item)
    bare.ClearField("id")
    return bare.SerializeToString(deterministic=True)


def content_keys(header: str, items: list[conversation_pb2.Item]) -> list[str]:
    """A key for each prefix of a conversation (the first item, the first two, ...), by
    content: a chained hash of the header key and each item without its id, which does
    not render (an item sent without one gets a new id on every request)."""
    digest = hashlib.blake2b(header.encode(), digest_size=16)
    keys = []
    for item in items:
        data = content_bytes(item)
        digest.update(len(data).to_bytes(8, "little") + data)
        keys.append(f"content:{digest.hexdigest()}")
    return keys


def header_key(request: CreateRequest) -> str:
    return request.header_key


async def pick_worker(
    p: Prepared, res: Resources, exclude: list[str] | None = None
) -> router_pb2.RouteDecision:
    """Ask the router for a worker (also how generation moves off a worker that is gone)."""
    assert p.model is not None
    try:
        return await res.backends.router.Route(
            router_pb2.RouteRequest(
                model=p.model.id,
                affinity_key=p.affinity_key,
                prompt_tokens=len(p.prompt),
                exclude_workers=exclude or [],
            ),
            timeout=res.timeout_s,
        )
    except grpc.aio.AioRpcError as err:
        raise rpc_unavailable("router", err) from None


def continues_from_cache(p: Prepared) -> bool:
    """The parent came from the connection-scoped cache: its derived state is current."""
    return p.parent is not None and p.parent.from_cache


class Stage:
    """One step of preparation; subclasses are frozen dataclasses of their variant."""

    name: ClassVar[str]

    def applies(self, p: Prepared) -> bool:
        """Whether the request needs this stage at all (a skipped stage is not timed)."""
        return True

    async def run(self, p: Prepared, res: Resources) -> None:
        raise NotImplementedError

    def check(self, p: Prepared) -> None:
        """What the client must fix in the stage's result. Untimed, and only once every
        stage running beside it is done: a check never cancels another stage's own
        error (a safety block outranks an over-long prompt)."""

    async def perform(self, p: Prepared, res: Resources) -> None:
        """Run as a pipeline step of its own: timed, then checked."""
        if self.applies(p):
            await _timed(self, p, res)
            self.check(p)


async def _timed(stage: Stage, p: Prepared, res: Resources) -> None:
    with p.ctx.stage(stage.name):
        await stage.run(p, res)


class Concurrently:
    """Stages independent of one another, run at the same time; all finish before
    the pipeline's next step."""

    def __init__(self, *stages: Stage) -> None:
        self.stages = stages

    def __repr__(self) -> str:
        return f"Concurrently{self.stages!r}"

    async def perform(self, p: Prepared, res: Resources) -> None:
        wanted = [stage for stage in self.stages if stage.applies(p)]
        try:
            async with asyncio.TaskGroup() as group:
                for stage in wanted:
                    group.create_task(_timed(stage, p, res))
        except* ApiError as failed:
            # A client error from any stage (a block, a bad image) answers the request.
            raise failed.exceptions[0] from None
        for stage in wanted:
            stage.check(p)


# What a pipeline lists: a stage, or stages that run at the same time.
Step = Stage | Concurrently


@dataclass(frozen=True)
class LoadConversation(Stage):
    """The response a follow-up names (``previous_response_id``)."""

    name: ClassVar[str] = "load_conversation"
    # Continue from the connection-scoped cache when it holds the parent (else the store).
    from_connection: bool = False
    # Take the parent's rendered tokens from the process's TokenCache.
    rendered_tokens: bool = False

    def applies(self, p: Prepared) -> bool:
        return bool(p.request.previous_response_id)

    async def run(self, p: Prepared, res: Resources) -> None:
        assert p.request.previous_response_id
        p.parent = await self.load(p.request.previous_response_id, p.ctx, res)

    async def load(
        self, previous_id: str, ctx: RequestContext, res: Resources
    ) -> ConversationState:
        if self.from_connection and ctx.connection_cache is not None:
            state = ctx.connection_cache.get(previous_id)
            if state is not None:
                state.from_cache = True
                return state
        chain = await res.store.chain(ctx.tenant, previous_id)
        if chain is None:
            raise invalid(
                f"Previous response with id '{previous_id}' not found.",
                "previous_response_id",
                "previous_response_not_found",
            )
        history = history_of(chain)
        call_names: dict[str, str] = {}
        rendered = res.token_cache.get(ctx.tenant, previous_id) if self.rendered_tokens else None
        return ConversationState(
            response=chain[-1].response,
            history=history,
            proto_history=to_proto(history, call_names),
            call_names=call_names,
            conversation_id=chain[0].id,
            affinity_key=chain[-1].affinity_key or chain[0].id,
            rendered=rendered,
        )


@dataclass(frozen=True)
class ValidateHistory(Stage):
    """The conversation passes the request validators and every tool output answers a
    call made before it; the new items then join the conversation they continue."""

    name: ClassVar[str] = "validate_history"
    # Continuing from the connection cache, validate only the new input (parsing the
    # request already did). Otherwise the rebuilt history goes through the validators
    # again, as a stateless server validates the whole input it assembled.
    incremental: bool = False

    async def run(self, p: Prepared, res: Resources) -> None:
        parent, request = p.parent, p.request
        if parent is not None and not (self.incremental and continues_from_cache(p)):
            normalize_input(parent.history, "previous_response_id")
        check_call_outputs(parent.history if parent else [], request.input_items)
        p.history = parent.history if parent else []
        p.call_names = dict(parent.call_names) if parent else {}
        p.new_items = to_proto(request.input_items, p.call_names)
        p.proto_history = (parent.proto_history if parent else []) + p.new_items
        if parent is not None:
            p.conversation_id, p.affinity_key = parent.conversation_id, parent.affinity_key
        else:
            p.conversation_id = p.response_id
            p.affinity_key = conversation_key(p.ctx.tenant, request, p.new_items)


@dataclass(frozen=True)
class ResolveModel(Stage):
    """The model the request names, and the response object that names it."""

    name: ClassVar[str] = "resolve_model"
    # Reuse the previous turn's model when the request names it again.
    reuse: bool = False
    # Keep model configurations in process instead of asking the router each time.
    cached: bool = False

    async def run(self, p: Prepared, res: Resources) -> None:
        p.model = await self._resolve(p, res)
        p.response = new_response(p.response_id, p.request, p.model.id)

    async def _resolve(self, p: Prepared, res: Resources) -> router_pb2.ModelConfig:
        name, parent = p.request.model, p.parent
        if (
            self.reuse
            and parent is not None
            and parent.model is not None
            and name in (parent.model.id, *parent.model.aliases)
        ):
            return parent.model
        if self.cached:
            cached = res.model_cache.get(name)
            if cached is not None:
                return cached
        try:
            model = await res.backends.router.ResolveModel(
                router_pb2.ResolveModelRequest(model=name), timeout=res.timeout_s
            )
        except grpc.aio.AioRpcError as err:
            if err.code() == grpc.StatusCode.NOT_FOUND:
                raise invalid(
                    f"The model '{name}' does not exist or you do not have access to it.",
                    "model",
                    "model_not_found",
                ) from None
            raise rpc_unavailable("router", err) from None
        # Filled on every pipeline: a cached pipeline later finds what any of them resolved.
        res.model_cache.put(name, model)
        return model

    def check(self, p: Prepared) -> None:
        asked, model = p.request.max_output_tokens, p.model
        assert model is not None
        if asked and asked > model.max_output_tokens:
            raise invalid(
                f"'max_output_tokens' is {asked}, above the model's limit of {model.max_output_tokens}.",
                "max_output_tokens",
                "invalid_value",
            )


@dataclass(frozen=True)
class Safety(Stage):
    """Block what the policy forbids; record what it flags."""

    name: ClassVar[str] = "safety"
    # Classify only the new items, folding them into the conversation's safety state
    # (when continuing from the connection cache; the whole history otherwise).
    incremental: bool = False
    # Score with the fused classifier (same scores, a fraction of the work).
    fast: bool = False

    async def run(self, p: Prepared, res: Resources) -> None:
        incremental = self.incremental and continues_from_cache(p)
        request = safety_pb2.ClassifyRequest(
            tenant=p.ctx.tenant,
            conversation_id=p.conversation_id,
            mode=safety_pb2.INCREMENTAL if incremental else safety_pb2.FULL,
            fast_path=self.fast,
            items=p.new_items if incremental else p.proto_history,
        )
        try:
            verdict = await res.backends.safety.Classify(request, timeout=res.timeout_s)
        except grpc.aio.AioRpcError as err:
            raise rpc_unavailable("safety", err) from None
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
            p.safety_flags = flags
            span.set_attribute("turnpike.safety.flags", flags)
            p.response["metadata"] = {
                **p.response["metadata"],
                SAFETY_METADATA_KEY: ",".join(flags)[:512],
            }
            log.info("response %s flagged: %s", p.response["id"], ", ".join(flags))


@dataclass(frozen=True)
class ResolveImages(Stage):
    """Image resolution without the proxy hop: the same code imageres runs, here in
    process."""

    name: ClassVar[str] = "resolve_images"
    # Continuing from the connection cache, resolve only the new items' images.
    reuse: bool = False

    async def run(self, p: Prepared, res: Resources) -> None:
        reuse = self.reuse and continues_from_cache(p)
        known = p.parent.image_tokens if reuse and p.parent is not None else 0
        p.image_tokens = known + await image_tokens(p.new_items if reuse else p.proto_history)


async def image_tokens(items: list[conversation_pb2.Item]) -> int:
    """The prompt tokens of the items' input images, each resolved (fetched, decoded,
    sized) off the event loop."""
    images = [image for item in items for image in item.images]
    if not images:
        return 0
    resolved = await asyncio.gather(
        *(
            asyncio.to_thread(resolve_image, i.url, i.file_id, i.detail, IMAGE_LIMITS)
            for i in images
        )
    )
    for index, result in enumerate(resolved):
        if result.error:
            raise invalid(f"Invalid input image {index}: {result.error}.", "input", "invalid_image")
    return sum(r.tokens for r in resolved)


@dataclass(frozen=True)
class Render(Stage):
    """The conversation as prompt tokens."""

    name: ClassVar[str] = "render"
    # Render only the new items and append them to the parent's cached tokens.
    append: bool = False
    # Without a parent (a client re-sending its whole history), look the longest rendered
    # prefix up by content in the process's TokenCache, and keep this render there too.
    by_content: bool = False

    async def run(self, p: Prepared, res: Resources) -> None:
        key = header_key(p.request)
        cached = p.parent.rendered if p.parent is not None else None
        keys = content_keys(key, p.proto_history) if self.by_content and not p.parent else []
        if keys:
            cached = res.token_cache.longest(p.ctx.tenant, keys)
        if self.append and cached is not None and cached.header_key == key:
            tokens = cached.tokens
            if tail := p.proto_history[cached.items :]:  # else the same history, re-sent
                request = tokenizer_pb2.RenderAppendRequest(items=tail)
                tokens = tokens + await _tokens(res, res.backends.tokenizer.RenderAppend, request)
        else:
            request = render_request(p.request, p.proto_history)
            tokens = await _tokens(res, res.backends.tokenizer.Render, request)
        p.rendered = RenderedPrefix(key, tokens, len(p.proto_history))
        p.prompt = tokens + res.completion_prompt
        if keys:
            res.token_cache.put(p.ctx.tenant, keys[-1], p.rendered)

    def check(self, p: Prepared) -> None:
        model = p.model
        assert model is not None
        if len(p.prompt) > model.context_window:
            raise invalid(
                f"Your input is {len(p.prompt)} tokens, over the model's context window of {model.context_window}.",
                "input",
                "context_length_exceeded",
            )


async def _tokens(
    res: Resources, method: Callable[..., Awaitable[tokenizer_pb2.RenderResponse]], request: Any
) -> array:
    reply = await res.tokenize(method, request)
    if reply.completion_prompt:
        res.completion_prompt = array("I", reply.completion_prompt)
    return array("I", reply.tokens)


@dataclass(frozen=True)
class Route(Stage):
    """The worker that generates (only when the request asks for generation)."""

    name: ClassVar[str] = "route"
    # Reuse the previous turn's worker for the same model.
    reuse: bool = False

    def applies(self, p: Prepared) -> bool:
        return p.request.generate

    async def run(self, p: Prepared, res: Resources) -> None:
        parent, model = p.parent, p.model
        assert model is not None
        if (
            self.reuse
            and parent is not None
            and parent.route is not None
            and parent.route.model.id == model.id
        ):
            p.route = parent.route
        else:
            p.route = await pick_worker(p, res)
