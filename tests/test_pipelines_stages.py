"""The pipelines as compositions of stages: what each one lists, and what its stages do
(or skip) with in-process stand-ins for the router, safety and tokenizer services."""

from __future__ import annotations

import asyncio
from array import array

import grpc
import pytest
from gateway import request_state
from gateway.engine import ResponseEngine
from gateway.errors import ApiError
from gateway.items import to_proto
from gateway.pipelines import (
    CONNECTION,
    LEGACY,
    PIPELINES,
    SPRINT,
    Pipeline,
    pipeline_named,
)
from gateway.request import CreateRequest, parse_create
from gateway.request_state import Prepared, RequestContext
from gateway.stages import (
    Concurrently,
    LoadConversation,
    Render,
    ResolveImages,
    ResolveModel,
    Route,
    Safety,
    ValidateHistory,
    content_keys,
    conversation_key,
    header_key,
)
from gateway.state import ConnectionCache, ConversationState, RenderedPrefix
from gateway.store import ResponseStore, StoredResponse
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from turnpike.router.v1 import router_pb2
from turnpike.safety.v1 import safety_pb2
from turnpike.tokenizer.v1 import tokenizer_pb2

TENANT = "acme"
MODEL = router_pb2.ModelConfig(
    id="sim", aliases=["sim-alias"], context_window=100, max_output_tokens=64
)
COMPLETION_PROMPT = [9, 9]


# -- stand-ins for the backends ----------------------------------------------------------


class Router:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def ResolveModel(self, request, timeout=None):
        self.calls.append("ResolveModel")
        if request.model not in (MODEL.id, *MODEL.aliases):
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.NOT_FOUND, grpc.aio.Metadata(), grpc.aio.Metadata(), "no model"
            )
        return MODEL

    async def Route(self, request, timeout=None):
        self.calls.append("Route")
        return router_pb2.RouteDecision(model=MODEL, worker_id="worker-1", worker_address="w:1")


class SafetyService:
    def __init__(self) -> None:
        self.requests: list[safety_pb2.ClassifyRequest] = []
        self.verdict = safety_pb2.ALLOW
        self.wait_for: asyncio.Event | None = None

    async def Classify(self, request, timeout=None):
        self.requests.append(request)
        if self.wait_for is not None:
            await self.wait_for.wait()
        findings = [safety_pb2.Finding(category="profanity")]
        return safety_pb2.ClassifyResponse(
            verdict=self.verdict,
            findings=findings if self.verdict != safety_pb2.ALLOW else [],
            items_scored=len(request.items),
        )


class Tokenizer:
    """Every item renders to ``per_item`` tokens: 1s in full, 2s appended."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.per_item = 3
        self.rendered = asyncio.Event()

    async def Render(self, request, timeout=None):
        self.calls.append(("Render", len(request.items)))
        self.rendered.set()
        return tokenizer_pb2.RenderResponse(
            tokens=[1] * (self.per_item * len(request.items)), completion_prompt=COMPLETION_PROMPT
        )

    async def RenderAppend(self, request, timeout=None):
        self.calls.append(("RenderAppend", len(request.items)))
        self.rendered.set()
        return tokenizer_pb2.RenderResponse(
            tokens=[2] * (self.per_item * len(request.items)), completion_prompt=COMPLETION_PROMPT
        )


class Backends:
    def __init__(self) -> None:
        self.router = Router()
        self.safety = SafetyService()
        self.tokenizer = Tokenizer()


@pytest.fixture
def backends() -> Backends:
    return Backends()


@pytest.fixture
def engine(backends: Backends) -> ResponseEngine:
    return ResponseEngine(backends, ResponseStore(100), outbox=None, timeout_s=1.0)


def create(websocket: bool = False, **body) -> CreateRequest:
    return parse_create(
        {"model": "sim", "input": "hi", **body}, default_model="sim", websocket=websocket
    )


def context(pipeline: Pipeline, cache: ConnectionCache | None = None) -> RequestContext:
    return RequestContext(tenant=TENANT, pipeline=pipeline, connection_cache=cache)


def message(role: str, text: str, item_id: str) -> dict:
    kind = "output_text" if role == "assistant" else "input_text"
    return {
        "id": item_id,
        "type": "message",
        "role": role,
        "content": [{"type": kind, "text": text}],
        "status": "completed",
    }


PARENT_INPUT = [message("user", "hello", "msg_u1")]
PARENT_OUTPUT = [message("assistant", "hi there", "msg_a1")]


async def store_parent(engine: ResponseEngine, response_id: str = "resp_parent") -> None:
    response = {"id": response_id, "output": PARENT_OUTPUT, "previous_response_id": None}
    await engine.store.put(StoredResponse(TENANT, response, PARENT_INPUT, "affinity-1"))


def cached_parent(follow_up: CreateRequest) -> ConversationState:
    """What a connection keeps of a finished response: model, worker, rendered tokens."""
    history = [*PARENT_INPUT, *PARENT_OUTPUT]
    call_names: dict[str, str] = {}
    proto_history = to_proto(history, call_names)
    return ConversationState(
        response={"id": "resp_parent"},
        history=history,
        proto_history=proto_history,
        call_names=call_names,
        conversation_id="resp_first",
        affinity_key="affinity-1",
        rendered=RenderedPrefix(header_key(follow_up), array("I", [5] * 10), len(proto_history)),
        model=MODEL,
        route=router_pb2.RouteDecision(model=MODEL, worker_id="worker-9", worker_address="w:9"),
        image_tokens=7,
    )


def shape(pipeline: Pipeline) -> list[str | tuple[str, ...]]:
    return [
        tuple(s.name for s in step.stages) if isinstance(step, Concurrently) else step.name
        for step in pipeline.stages
    ]


# -- composition -------------------------------------------------------------------------


def test_each_pipeline_lists_its_stages_in_order() -> None:
    head = ["load_conversation", "validate_history", "resolve_model"]
    assert shape(LEGACY) == [*head, "safety", "render", "route"]
    for pipeline in (SPRINT, CONNECTION):
        assert shape(pipeline) == [*head, ("safety", "resolve_images", "render"), "route"]
    assert PIPELINES == {"legacy": LEGACY, "sprint": SPRINT, "connection": CONNECTION}


@pytest.mark.parametrize(
    ("pipeline", "stages", "image_hop", "blocking_billing", "cache_rendered_tokens"),
    [
        (
            LEGACY,
            [
                LoadConversation(),
                ValidateHistory(),
                ResolveModel(),
                Safety(),
                Render(),
                Route(),
            ],
            True,
            True,
            False,
        ),
        (
            SPRINT,
            [
                LoadConversation(rendered_tokens=True),
                ValidateHistory(),
                ResolveModel(cached=True),
                Safety(fast=True),
                ResolveImages(),
                Render(append=True, by_content=True),
                Route(),
            ],
            False,
            False,
            True,
        ),
        (
            CONNECTION,
            [
                LoadConversation(from_connection=True),
                ValidateHistory(incremental=True),
                ResolveModel(reuse=True, cached=True),
                Safety(incremental=True, fast=True),
                ResolveImages(reuse=True),
                Render(append=True),
                Route(reuse=True),
            ],
            False,
            False,
            False,
        ),
    ],
    ids=lambda v: v.name if isinstance(v, Pipeline) else None,
)
def test_each_pipeline_configures_its_stages(
    pipeline, stages, image_hop, blocking_billing, cache_rendered_tokens
) -> None:
    for stage in stages:
        assert pipeline.stage(type(stage)) == stage
    assert pipeline.image_hop is image_hop
    assert pipeline.blocking_billing is blocking_billing
    assert pipeline.cache_rendered_tokens is cache_rendered_tokens


def test_images_are_resolved_once_by_the_hop_or_by_a_stage() -> None:
    with pytest.raises(ValueError, match="one resolver"):
        Pipeline("both", (Concurrently(ResolveImages(), Render()),), True, False)
    with pytest.raises(ValueError, match="one resolver"):
        Pipeline("neither", (Render(),), False, False)


def test_a_request_picks_a_pipeline_only_when_allowed() -> None:
    assert pipeline_named(None, SPRINT, True) is SPRINT
    assert pipeline_named("legacy", SPRINT, False) is SPRINT
    assert pipeline_named(" Connection ", SPRINT, True) is CONNECTION
    with pytest.raises(ApiError) as err:
        pipeline_named("fast", SPRINT, True)
    assert err.value.status == 400 and err.value.param == "X-Turnpike-Pipeline"
    assert err.value.code == "invalid_value"
    assert err.value.message == (
        "Unknown pipeline 'fast'; expected one of: legacy, sprint, connection."
    )


# -- stages at work ----------------------------------------------------------------------


async def test_legacy_times_each_stage_in_order(engine, backends) -> None:
    ctx = context(LEGACY)
    prepared = await engine.prepare(create(), ctx)
    assert list(ctx.stage_ms) == [
        "validate_history",
        "resolve_model",
        "safety",
        "render",
        "route",
    ]
    assert prepared.route.worker_id == "worker-1"
    assert prepared.prompt == array("I", [1] * 3 + COMPLETION_PROMPT)
    assert prepared.response["model"] == "sim" and prepared.conversation_id == prepared.response_id
    [classify] = backends.safety.requests
    assert classify.mode == safety_pb2.FULL and not classify.fast_path


async def test_stages_a_request_does_not_need_are_skipped(engine) -> None:
    ctx = context(SPRINT)
    prepared = await engine.prepare(create(websocket=True, generate=False), ctx)
    assert set(ctx.stage_ms) == {
        "validate_history",
        "resolve_model",
        "safety",
        "resolve_images",
        "render",
    }
    assert prepared.route is None
    await store_parent(engine)
    ctx = context(SPRINT)
    await engine.prepare(create(previous_response_id="resp_parent"), ctx)
    assert next(iter(ctx.stage_ms)) == "load_conversation" and "route" in ctx.stage_ms


async def test_each_stage_has_its_span(engine, monkeypatch) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(request_state, "tracer", provider.get_tracer("test"))
    await engine.prepare(create(), context(CONNECTION))
    spans = exporter.get_finished_spans()
    names = ["validate_history", "resolve_model", "safety", "resolve_images", "render", "route"]
    assert sorted(s.name for s in spans) == sorted(f"stage.{name}" for name in names)
    assert {s.attributes["turnpike.pipeline"] for s in spans} == {"connection"}


async def test_connection_continues_from_its_cache_without_asking_again(engine, backends) -> None:
    follow_up = create(previous_response_id="resp_parent", input="and now?", model="sim-alias")
    cache = ConnectionCache(4)
    cache.put("resp_parent", cached_parent(follow_up))
    ctx = context(CONNECTION, cache)
    prepared = await engine.prepare(follow_up, ctx)
    # Model and worker come from the previous turn: the router is not asked.
    assert backends.router.calls == []
    assert prepared.model is MODEL and prepared.route.worker_id == "worker-9"
    # Safety scores only the new item, folded into the conversation's state.
    [classify] = backends.safety.requests
    assert classify.mode == safety_pb2.INCREMENTAL and classify.fast_path
    assert [item.text for item in classify.items] == ["and now?"]
    assert classify.conversation_id == "resp_first"
    # Only the new item is rendered, appended to the cached tokens.
    assert backends.tokenizer.calls == [("RenderAppend", 1)]
    assert prepared.prompt == array("I", [5] * 10 + [2] * 3 + COMPLETION_PROMPT)
    assert prepared.image_tokens == 7  # the parent's images are not resolved again
    assert prepared.affinity_key == "affinity-1" and len(prepared.proto_history) == 3
    assert "load_conversation" in ctx.stage_ms


async def test_connection_without_the_parent_in_its_cache_rebuilds_from_the_store(
    engine, backends
) -> None:
    await store_parent(engine)
    ctx = context(CONNECTION, ConnectionCache(4))
    prepared = await engine.prepare(create(previous_response_id="resp_parent"), ctx)
    assert backends.router.calls == ["ResolveModel", "Route"]
    [classify] = backends.safety.requests
    assert classify.mode == safety_pb2.FULL and len(classify.items) == 3
    assert backends.tokenizer.calls == [("Render", 3)]
    assert prepared.conversation_id == "resp_parent" and prepared.image_tokens == 0


async def test_sprint_keeps_model_configs_and_rendered_tokens_in_process(engine, backends) -> None:
    await store_parent(engine)
    follow_up = create(previous_response_id="resp_parent")
    engine.res.token_cache.put(
        TENANT, "resp_parent", RenderedPrefix(header_key(follow_up), array("I", [5] * 4), 2)
    )
    # Legacy asks the router every time, and ignores the token cache ...
    await engine.prepare(follow_up, context(LEGACY))
    assert backends.router.calls == ["ResolveModel", "Route"]
    assert backends.tokenizer.calls == [("Render", 3)]
    # ... but what it resolved serves sprint, which appends to the cached tokens.
    prepared = await engine.prepare(follow_up, context(SPRINT))
    assert backends.router.calls == ["ResolveModel", "Route", "Route"]
    assert backends.tokenizer.calls[-1] == ("RenderAppend", 1)
    assert prepared.prompt == array("I", [5] * 4 + [2] * 3 + COMPLETION_PROMPT)
    assert backends.safety.requests[-1].mode == safety_pb2.FULL


async def test_a_safety_block_outranks_an_over_long_prompt(engine, backends) -> None:
    backends.tokenizer.per_item = 200  # over the context window of 100
    backends.safety.verdict = safety_pb2.BLOCK
    # Safety answers only after rendering is done: the window is checked after both.
    backends.safety.wait_for = backends.tokenizer.rendered
    with pytest.raises(ApiError) as err:
        await engine.prepare(create(), context(SPRINT))
    assert err.value.code == "content_policy_violation"
    assert err.value.message == (
        "Your request was blocked by the safety system (profanity). "
        "Remove the offending content and try again."
    )
    backends.safety.verdict = safety_pb2.ALLOW
    for pipeline in (LEGACY, SPRINT):
        with pytest.raises(ApiError) as err:
            await engine.prepare(create(), context(pipeline))
        assert (err.value.code, err.value.param) == ("context_length_exceeded", "input")
        assert err.value.message == (
            "Your input is 202 tokens, over the model's context window of 100."
        )


async def test_a_flag_is_recorded_on_the_response(engine, backends) -> None:
    backends.safety.verdict = safety_pb2.FLAG
    prepared = await engine.prepare(create(metadata={"k": "v"}), context(SPRINT))
    assert prepared.safety_flags == ["profanity"]
    assert prepared.response["metadata"] == {"k": "v", "turnpike_safety_flags": "profanity"}


async def test_the_model_is_checked_before_later_stages_run(engine, backends) -> None:
    with pytest.raises(ApiError) as err:
        await engine.prepare(create(max_output_tokens=100), context(SPRINT))
    assert (err.value.code, err.value.param) == ("invalid_value", "max_output_tokens")
    assert err.value.message == "'max_output_tokens' is 100, above the model's limit of 64."
    with pytest.raises(ApiError) as err:
        await engine.prepare(create(model="nope"), context(SPRINT))
    assert (err.value.code, err.value.param) == ("model_not_found", "model")
    assert backends.safety.requests == [] and backends.tokenizer.calls == []


async def test_counting_input_tokens_loads_like_the_pipeline(engine, backends) -> None:
    await store_parent(engine)
    request = create(previous_response_id="resp_parent")
    count = await engine.count_input_tokens(request, context(SPRINT))
    assert count == 3 * 3 + len(COMPLETION_PROMPT)
    with pytest.raises(ApiError) as err:
        await engine.count_input_tokens(create(previous_response_id="resp_x"), context(SPRINT))
    assert err.value.code == "previous_response_not_found"


async def test_a_stage_fills_in_the_shared_state(engine) -> None:
    prepared = Prepared(create(input=[message("user", "hi", "msg_1")]), context(SPRINT), "resp_1")
    await ValidateHistory().run(prepared, engine.res)
    assert [item.id for item in prepared.proto_history] == ["msg_1"]
    assert prepared.new_items == prepared.proto_history
    assert prepared.proto_history is not prepared.new_items
    assert prepared.affinity_key.startswith(f"{TENANT}:conv:")


async def test_a_rebuilt_history_is_validated_again_a_cached_one_is_not(engine) -> None:
    """Legacy and sprint run the request validators over the whole conversation they
    rebuilt; a connection continuing from its cache validates only the new input."""
    follow_up = create(previous_response_id="resp_parent", input="and now?")
    parent = cached_parent(follow_up)
    parent.history = [*parent.history, {"type": "bogus"}]  # what the validators reject

    def prepared_with(pipeline: Pipeline, from_cache: bool) -> Prepared:
        prepared = Prepared(follow_up, context(pipeline), "resp_2")
        prepared.parent = parent
        parent.from_cache = from_cache
        return prepared

    for pipeline in (LEGACY, SPRINT):
        with pytest.raises(ApiError) as err:
            await pipeline.stage(ValidateHistory).run(prepared_with(pipeline, False), engine.res)
        assert err.value.code == "unsupported_item_type"
    stage = CONNECTION.stage(ValidateHistory)
    await stage.run(prepared_with(CONNECTION, True), engine.res)
    # Not continuing from the cache (the parent came from the store): validated whole.
    with pytest.raises(ApiError):
        await stage.run(prepared_with(CONNECTION, False), engine.res)


def test_a_conversation_without_a_parent_is_keyed_by_how_it_starts() -> None:
    """A stateless client re-sends its history every turn, its items often without ids
    (each then gets a new one): the routing key must not change, or the conversation
    hops between workers and loses its prefix cache."""

    def key(request: CreateRequest, tenant: str = TENANT) -> str:
        return conversation_key(tenant, request, to_proto(request.input_items, {}))

    start = [{"role": "user", "content": "Fix the parser."}]
    turn_1 = create(input=start, instructions="be brief")
    turn_2 = create(
        input=[*start, message("assistant", "On it.", "msg_9")], instructions="be brief"
    )
    assert turn_1.input_items[0]["id"] != turn_2.input_items[0]["id"]  # fresh ids
    assert key(turn_1) == key(turn_2)
    assert key(create(input=start, instructions="be verbose")) != key(turn_1)
    assert key(create(input=[{"role": "user", "content": "Other."}])) != key(turn_1)
    assert key(turn_1, tenant="other") != key(turn_1)
    assert key(create(input=start, prompt_cache_key="k")) == f"{TENANT}:pck:k"


async def test_sprint_renders_a_resent_history_by_appending_to_its_longest_known_prefix(
    engine, backends
) -> None:
    """A client that re-sends its whole history (no previous_response_id) gets the same
    append as a chained one: the prefix is found by content, whatever the items' ids."""
    history = [{"role": "user", "content": "Fix the parser."}]
    await engine.prepare(create(input=history), context(SPRINT))
    assert backends.tokenizer.calls == [("Render", 1)]
    history += [message("assistant", "Which file?", "msg_a1"), message("user", "parse.py", "u2")]
    prepared = await engine.prepare(create(input=history), context(SPRINT))
    assert backends.tokenizer.calls[-1] == ("RenderAppend", 2)
    assert prepared.prompt == array("I", [1] * 3 + [2] * 6 + COMPLETION_PROMPT)
    # The same history again: all of it is known, nothing is rendered.
    calls = len(backends.tokenizer.calls)
    again = await engine.prepare(create(input=history), context(SPRINT))
    assert len(backends.tokenizer.calls) == calls and again.prompt == prepared.prompt
    # Other instructions, another tenant, or legacy: rendered in full.
    await engine.prepare(create(input=history, instructions="be brief"), context(SPRINT))
    assert backends.tokenizer.calls[-1] == ("Render", 3)
    other = RequestContext(tenant="other", pipeline=SPRINT)
    await engine.prepare(create(input=history), other)
    assert backends.tokenizer.calls[-1] == ("Render", 3)
    await engine.prepare(create(input=history), context(LEGACY))
    assert backends.tokenizer.calls[-1] == ("Render", 3)


def test_content_keys_follow_content_not_ids() -> None:
    def items(*texts: str, ids: str = "a") -> list:
        return to_proto([message("user", t, f"msg_{ids}{i}") for i, t in enumerate(texts)], {})

    keys = content_keys("h", items("one", "two"))
    assert keys == content_keys("h", items("one", "two", ids="b"))  # other ids
    assert keys[0] == content_keys("h", items("one"))[0]  # a prefix keeps its key
    assert keys[1] != content_keys("h", items("one", "other"))[1]
    assert keys != content_keys("other header", items("one", "two"))
    # Item boundaries count: the same text split differently is another conversation.
    assert content_keys("h", items("ab", "c"))[1] != content_keys("h", items("a", "bc"))[1]
