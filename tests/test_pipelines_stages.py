"""The pipelines as compositions of stages: their data flow (checked when a pipeline is
built, and held to by every stage), and what the stages do (or skip) with in-process
stand-ins for the router, safety and tokenizer services."""

from __future__ import annotations

import asyncio
import dataclasses
from array import array

import grpc
import pytest
from gateway import request_context
from gateway.backends import Backends
from gateway.connection_cache import ConnectionCache
from gateway.conversation_state import ConversationState, RenderedPrefix
from gateway.engine import ResponseEngine
from gateway.errors import ApiError
from gateway.items import to_proto
from gateway.model_cache import ModelConfigCache
from gateway.pipelines import (
    CONNECTION,
    LEGACY,
    PIPELINES,
    SPRINT,
    Pipeline,
    check_data_flow,
    pipeline_named,
)
from gateway.prepared import STAGE_OUTPUTS, Parent, Prepared
from gateway.request import CreateRequest, parse_create
from gateway.request_context import RequestContext
from gateway.stages import (
    Concurrently,
    LoadConversation,
    Render,
    ResolveImages,
    ResolveModel,
    Resources,
    Route,
    Safety,
    Stage,
    ValidateHistory,
    each_stage,
)
from gateway.stages.keys import content_keys, conversation_key
from gateway.store import StoredResponse
from gateway.store_memory import InMemoryResponseStore
from gateway.token_cache import TokenCache
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from turnpike.image_resolution import Limits
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


class StandIns(Backends):
    """The gateway's backend clients (and their one way of calling), over stand-ins."""

    def __init__(self) -> None:
        self.timeout_s = 1.0
        self.router = Router()
        self.safety = SafetyService()
        self.tokenizer = Tokenizer()


@pytest.fixture
def backends() -> StandIns:
    return StandIns()


def resources(backends: Backends) -> Resources:
    return Resources(
        backends, InMemoryResponseStore(100), ModelConfigCache(30.0), TokenCache(10**6), Limits()
    )


@pytest.fixture
def engine(backends: StandIns) -> ResponseEngine:
    return ResponseEngine(resources(backends), outbox=None)


def create(websocket: bool = False, **body) -> CreateRequest:
    return parse_create(
        {"model": "sim", "input": "hi", **body}, default_model="sim", websocket=websocket
    )


def context(pipeline: Pipeline, cache: ConnectionCache | None = None, tenant: str = TENANT):
    return RequestContext(tenant, pipeline.name, connection_cache=cache)


async def prepare(
    engine: ResponseEngine,
    request: CreateRequest,
    pipeline: Pipeline,
    ctx: RequestContext | None = None,
) -> Prepared:
    return await engine.prepare(request, ctx or context(pipeline), pipeline)


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
    await engine.res.store.put(StoredResponse(TENANT, response, PARENT_INPUT, "affinity-1"))


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
        rendered=RenderedPrefix(
            follow_up.header_key,
            array("I", [5] * 10),
            len(proto_history),
            array("I", COMPLETION_PROMPT),
        ),
        model=MODEL,
        route=router_pb2.RouteDecision(model=MODEL, worker_id="worker-9", worker_address="w:9"),
        image_tokens=7,
    )


def shape(pipeline: Pipeline) -> list[str | tuple[str, ...]]:
    return [
        tuple(s.name for s in step.stages) if isinstance(step, Concurrently) else step.name
        for step in pipeline.stages
    ]


# -- composition and data flow ---------------------------------------------------------


def steps(*names: str) -> tuple:
    """Stages by name, in the order the pipelines list them."""
    stage_of = {
        "load": LoadConversation(),
        "validate": ValidateHistory(),
        "model": ResolveModel(),
        "safety": Safety(),
        "images": ResolveImages(),
        "render": Render(),
        "route": Route(),
    }
    return tuple(stage_of[name] for name in names)


def test_the_pipelines_are_the_three_of_the_design() -> None:
    assert PIPELINES == {"legacy": LEGACY, "sprint": SPRINT, "connection": CONNECTION}
    assert (LEGACY.policy.worker_via_imageres, LEGACY.policy.billing_before_terminal) == (
        True,
        True,
    )
    # Sprint keeps each response's tokens for its own loader; the others never look.
    assert [p.policy.keep_rendered_tokens for p in (LEGACY, SPRINT, CONNECTION)] == [
        False,
        True,
        False,
    ]


def test_a_stage_may_read_only_what_an_earlier_step_wrote() -> None:
    check_data_flow("ok", steps("load", "validate", "model", "render", "route"))
    with pytest.raises(ValueError, match=r"bad: render reads conversation, model, parent"):
        check_data_flow("bad", steps("render"))
    with pytest.raises(ValueError, match=r"bad: route reads prompt, which no earlier step"):
        check_data_flow("bad", steps("load", "validate", "model", "route", "render"))


def test_stages_running_together_neither_share_an_output_nor_read_each_other() -> None:
    load, validate, model, *_ = steps("load", "validate", "model")
    head = (load, validate, model)
    check_data_flow("ok", (*head, Concurrently(Safety(), ResolveImages(), Render())))
    with pytest.raises(ValueError, match="render writes 'prompt', which another stage writes"):
        check_data_flow("bad", (*head, Concurrently(Render(), Render(append=True))))
    with pytest.raises(ValueError, match="route reads prompt, which no earlier step writes"):
        check_data_flow("bad", (*head, Concurrently(Render(), Route())))
    with pytest.raises(ValueError, match="resolve_model writes 'model', which another"):
        check_data_flow("bad", (*head, ResolveModel(cached=True)))


def test_images_are_resolved_once_by_the_hop_or_by_a_stage() -> None:
    head = steps("load", "validate", "model")
    with pytest.raises(ValueError, match="one resolver"):
        Pipeline("both", (*head, Concurrently(ResolveImages(), Render())), True, False)
    with pytest.raises(ValueError, match="one resolver"):
        Pipeline("neither", (*head, Render()), False, False)


class Recorded(Prepared):
    """A ``Prepared`` that notes which stage reads or writes which of its fields."""

    def __init__(self, *args) -> None:
        object.__setattr__(self, "current", None)  # the stage at work
        object.__setattr__(self, "reads", {})
        object.__setattr__(self, "writes", {})
        super().__init__(*args)

    def __getattribute__(self, name: str):
        if name in Recorded.FIELDS:
            current = object.__getattribute__(self, "current")
            object.__getattribute__(self, "reads").setdefault(current, set()).add(name)
        return object.__getattribute__(self, name)

    def __setattr__(self, name: str, value) -> None:
        if name in Recorded.FIELDS and self.current is not None:
            self.writes.setdefault(self.current, set()).add(name)
        object.__setattr__(self, name, value)


Recorded.FIELDS = frozenset(f.name for f in dataclasses.fields(Prepared))


async def run_recorded(pipeline: Pipeline, p: Recorded, res: Resources) -> None:
    """Each stage on its own (reads of stages running together are told apart)."""
    for stage in each_stage(pipeline.steps):
        object.__setattr__(p, "current", stage)
        if stage.applies(p):
            output = await stage.run(p, res)
            object.__setattr__(p, "current", "pipeline")
            setattr(p, stage.output, output)
            object.__setattr__(p, "current", stage)
            stage.check(p)


@pytest.mark.parametrize("pipeline", [LEGACY, SPRINT, CONNECTION], ids=lambda p: p.name)
@pytest.mark.parametrize("turn", ["first", "from the store", "from the connection cache"])
async def test_every_stage_reads_only_its_inputs_and_writes_only_its_output(
    engine, pipeline: Pipeline, turn: str
) -> None:
    await store_parent(engine)
    request, cache = create(), ConnectionCache(4)
    if turn != "first":
        request = create(previous_response_id="resp_parent", input="and now?")
    if turn == "from the connection cache":
        cache.put("resp_parent", cached_parent(request))
    p = Recorded(request, context(pipeline, cache), "resp_1")
    await run_recorded(pipeline, p, engine.res)
    stages: list[Stage] = list(each_stage(pipeline.steps))
    for stage in stages:
        assert p.reads.get(stage, set()) <= stage.inputs | {stage.output}, stage.name
        assert stage.output in STAGE_OUTPUTS
    assert not any(p.writes.get(stage) for stage in stages)  # outputs come back from run
    assert p.writes["pipeline"] == {s.output for s in stages if s.applies(p)}


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
    prepared = await prepare(engine, create(), LEGACY, ctx)
    assert list(ctx.stage_ms) == [
        "validate_history",
        "resolve_model",
        "safety",
        "render",
        "route",
    ]
    assert prepared.route.worker_id == "worker-1"
    assert prepared.prompt.tokens == array("I", [1] * 3 + COMPLETION_PROMPT)
    assert prepared.response["model"] == "sim"
    assert prepared.conversation.conversation_id == prepared.response_id
    [classify] = backends.safety.requests
    assert classify.mode == safety_pb2.FULL and not classify.fast_path


async def test_stages_a_request_does_not_need_are_skipped(engine) -> None:
    ctx = context(SPRINT)
    prepared = await prepare(engine, create(websocket=True, generate=False), SPRINT, ctx)
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
    await prepare(engine, create(previous_response_id="resp_parent"), SPRINT, ctx)
    assert next(iter(ctx.stage_ms)) == "load_conversation" and "route" in ctx.stage_ms


async def test_each_stage_has_its_span(engine, monkeypatch) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(request_context, "tracer", provider.get_tracer("test"))
    await prepare(engine, create(), CONNECTION)
    spans = exporter.get_finished_spans()
    names = ["validate_history", "resolve_model", "safety", "resolve_images", "render", "route"]
    assert sorted(s.name for s in spans) == sorted(f"stage.{name}" for name in names)
    assert {s.attributes["turnpike.pipeline"] for s in spans} == {"connection"}


async def test_connection_continues_from_its_cache_without_asking_again(engine, backends) -> None:
    follow_up = create(previous_response_id="resp_parent", input="and now?", model="sim-alias")
    cache = ConnectionCache(4)
    cache.put("resp_parent", cached_parent(follow_up))
    ctx = context(CONNECTION, cache)
    prepared = await prepare(engine, follow_up, CONNECTION, ctx)
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
    assert prepared.prompt.tokens == array("I", [5] * 10 + [2] * 3 + COMPLETION_PROMPT)
    assert prepared.image_tokens == 7  # the parent's images are not resolved again
    conversation = prepared.conversation
    assert conversation.affinity_key == "affinity-1" and len(conversation.items) == 3
    assert "load_conversation" in ctx.stage_ms


async def test_connection_without_the_parent_in_its_cache_rebuilds_from_the_store(
    engine, backends
) -> None:
    await store_parent(engine)
    ctx = context(CONNECTION, ConnectionCache(4))
    prepared = await prepare(engine, create(previous_response_id="resp_parent"), CONNECTION, ctx)
    assert backends.router.calls == ["ResolveModel", "Route"]
    [classify] = backends.safety.requests
    assert classify.mode == safety_pb2.FULL and len(classify.items) == 3
    assert backends.tokenizer.calls == [("Render", 3)]
    assert prepared.conversation.conversation_id == "resp_parent" and prepared.image_tokens == 0


async def test_sprint_keeps_model_configs_and_rendered_tokens_in_process(engine, backends) -> None:
    await store_parent(engine)
    follow_up = create(previous_response_id="resp_parent")
    engine.res.token_cache.put(
        TENANT,
        "resp_parent",
        RenderedPrefix(follow_up.header_key, array("I", [5] * 4), 2, array("I", COMPLETION_PROMPT)),
    )
    # Legacy asks the router every time, and ignores the token cache ...
    await prepare(engine, follow_up, LEGACY)
    assert backends.router.calls == ["ResolveModel", "Route"]
    assert backends.tokenizer.calls == [("Render", 3)]
    # ... but what it resolved serves sprint, which appends to the cached tokens.
    prepared = await prepare(engine, follow_up, SPRINT)
    assert backends.router.calls == ["ResolveModel", "Route", "Route"]
    assert backends.tokenizer.calls[-1] == ("RenderAppend", 1)
    assert prepared.prompt.tokens == array("I", [5] * 4 + [2] * 3 + COMPLETION_PROMPT)
    assert backends.safety.requests[-1].mode == safety_pb2.FULL


async def test_a_safety_block_outranks_an_over_long_prompt(engine, backends) -> None:
    backends.tokenizer.per_item = 200  # over the context window of 100
    backends.safety.verdict = safety_pb2.BLOCK
    # Safety answers only after rendering is done: the window is checked after both.
    backends.safety.wait_for = backends.tokenizer.rendered
    with pytest.raises(ApiError) as err:
        await prepare(engine, create(), SPRINT)
    assert err.value.code == "content_policy_violation"
    assert err.value.message == (
        "Your request was blocked by the safety system (profanity). "
        "Remove the offending content and try again."
    )
    backends.safety.verdict = safety_pb2.ALLOW
    for pipeline in (LEGACY, SPRINT):
        with pytest.raises(ApiError) as err:
            await prepare(engine, create(), pipeline)
        assert (err.value.code, err.value.param) == ("context_length_exceeded", "input")
        assert err.value.message == (
            "Your input is 202 tokens, over the model's context window of 100."
        )


async def test_a_flag_is_recorded_on_the_response(engine, backends) -> None:
    backends.safety.verdict = safety_pb2.FLAG
    prepared = await prepare(engine, create(metadata={"k": "v"}), SPRINT)
    assert prepared.safety_flags == ("profanity",)
    assert prepared.response["metadata"] == {"k": "v", "turnpike_safety_flags": "profanity"}


async def test_the_model_is_checked_before_later_stages_run(engine, backends) -> None:
    with pytest.raises(ApiError) as err:
        await prepare(engine, create(max_output_tokens=100), SPRINT)
    assert (err.value.code, err.value.param) == ("invalid_value", "max_output_tokens")
    assert err.value.message == "'max_output_tokens' is 100, above the model's limit of 64."
    with pytest.raises(ApiError) as err:
        await prepare(engine, create(model="nope"), SPRINT)
    assert (err.value.code, err.value.param) == ("model_not_found", "model")
    assert backends.safety.requests == [] and backends.tokenizer.calls == []


async def test_counting_input_tokens_loads_like_the_pipeline(engine, backends) -> None:
    await store_parent(engine)
    request = create(previous_response_id="resp_parent")
    count = await engine.count_input_tokens(request, TENANT)
    assert count == 3 * 3 + len(COMPLETION_PROMPT)
    with pytest.raises(ApiError) as err:
        await engine.count_input_tokens(create(previous_response_id="resp_x"), TENANT)
    assert err.value.code == "previous_response_not_found"


async def test_a_stage_returns_its_output(engine) -> None:
    prepared = Prepared(create(input=[message("user", "hi", "msg_1")]), context(SPRINT), "resp_1")
    conversation = await ValidateHistory().run(prepared, engine.res)
    assert prepared.conversation is None  # the pipeline fills it in, not the stage
    assert [item.id for item in conversation.items] == ["msg_1"]
    assert conversation.new_items == conversation.items
    assert conversation.items is not conversation.new_items
    assert conversation.affinity_key.startswith(f"{TENANT}:conv:")


async def test_a_rebuilt_history_is_validated_again_a_cached_one_is_not(engine) -> None:
    """Legacy and sprint run the request validators over the whole conversation they
    rebuilt; a connection continuing from its cache validates only the new input."""
    follow_up = create(previous_response_id="resp_parent", input="and now?")
    state = cached_parent(follow_up)
    state = dataclasses.replace(state, history=[*state.history, {"type": "bogus"}])

    def prepared_with(from_connection_cache: bool) -> Prepared:
        prepared = Prepared(follow_up, context(CONNECTION), "resp_2")
        prepared.parent = Parent(state, from_connection_cache)
        return prepared

    for from_cache in (False, True):
        with pytest.raises(ApiError) as err:
            await ValidateHistory().run(prepared_with(from_cache), engine.res)
        assert err.value.code == "unsupported_item_type"
    incremental = ValidateHistory(incremental=True)
    await incremental.run(prepared_with(True), engine.res)
    # Not continuing from the cache (the parent came from the store): validated whole.
    with pytest.raises(ApiError):
        await incremental.run(prepared_with(False), engine.res)


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
    await prepare(engine, create(input=history), SPRINT)
    assert backends.tokenizer.calls == [("Render", 1)]
    history += [message("assistant", "Which file?", "msg_a1"), message("user", "parse.py", "u2")]
    prepared = await prepare(engine, create(input=history), SPRINT)
    assert backends.tokenizer.calls[-1] == ("RenderAppend", 2)
    assert prepared.prompt.tokens == array("I", [1] * 3 + [2] * 6 + COMPLETION_PROMPT)
    # The same history again: all of it is known, nothing is rendered.
    calls = len(backends.tokenizer.calls)
    again = await prepare(engine, create(input=history), SPRINT)
    assert len(backends.tokenizer.calls) == calls
    assert again.prompt.tokens == prepared.prompt.tokens
    # Other instructions, another tenant, or legacy: rendered in full.
    await prepare(engine, create(input=history, instructions="be brief"), SPRINT)
    assert backends.tokenizer.calls[-1] == ("Render", 3)
    await prepare(engine, create(input=history), SPRINT, context(SPRINT, tenant="other"))
    assert backends.tokenizer.calls[-1] == ("Render", 3)
    await prepare(engine, create(input=history), LEGACY)
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
