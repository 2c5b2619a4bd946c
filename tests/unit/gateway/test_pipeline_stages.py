"""What the stages do (or skip) on each pipeline, with in-process stand-ins for the
router, safety and tokenizer services."""

from __future__ import annotations

import dataclasses
from array import array

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from support.gateway_standins import (
    COMPLETION_PROMPT,
    MODEL,
    TENANT,
    cached_parent,
    context,
    create,
    message,
    prepare,
    prompt_of,
    response_of,
    store_parent,
)
from support.spans import attributes

from turnpike.gateway.pipeline import request_context
from turnpike.gateway.pipeline.prepared import Parent, Prepared
from turnpike.gateway.pipeline.stages import ValidateHistory
from turnpike.gateway.pipeline.stages.keys import content_keys, conversation_key
from turnpike.gateway.pipeline.variants import CONNECTION, LEGACY, SPRINT
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.items import to_proto
from turnpike.gateway.protocol.request import CreateRequest
from turnpike.gateway.state.connection_cache import ConnectionCache
from turnpike.gateway.state.conversation_state import RenderedPrefix
from turnpike.safety.v1 import safety_pb2

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
    assert prepared.route is not None and prepared.route.worker_id == "worker-1"
    assert prompt_of(prepared).tokens == array("I", [1] * 3 + COMPLETION_PROMPT)
    assert response_of(prepared)["model"] == "sim"
    assert prepared.conversation is not None
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
    assert {attributes(s)["turnpike.pipeline"] for s in spans} == {"connection"}


async def test_connection_continues_from_its_cache_without_asking_again(engine, backends) -> None:
    follow_up = create(previous_response_id="resp_parent", input="and now?", model="sim-alias")
    cache = ConnectionCache(4)
    cache.put("resp_parent", cached_parent(follow_up))
    ctx = context(CONNECTION, cache)
    prepared = await prepare(engine, follow_up, CONNECTION, ctx)
    # Model and worker come from the previous turn: the router is not asked.
    assert backends.router.calls == []
    assert prepared.model is MODEL
    assert prepared.route is not None and prepared.route.worker_id == "worker-9"
    # Safety scores only the new item, folded into the conversation's state.
    [classify] = backends.safety.requests
    assert classify.mode == safety_pb2.INCREMENTAL and classify.fast_path
    assert [item.text for item in classify.items] == ["and now?"]
    assert classify.conversation_id == "resp_first"
    # Only the new item is rendered, appended to the cached tokens.
    assert backends.tokenizer.calls == [("RenderAppend", 1)]
    assert prompt_of(prepared).tokens == array("I", [5] * 10 + [2] * 3 + COMPLETION_PROMPT)
    assert prepared.image_tokens == 7  # the parent's images are not resolved again
    conversation = prepared.conversation
    assert conversation is not None
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
    assert prepared.conversation is not None and prepared.image_tokens == 0
    assert prepared.conversation.conversation_id == "resp_parent"


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
    assert prompt_of(prepared).tokens == array("I", [5] * 4 + [2] * 3 + COMPLETION_PROMPT)
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
    assert response_of(prepared)["metadata"] == {"k": "v", "turnpike_safety_flags": "profanity"}


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
    assert prompt_of(prepared).tokens == array("I", [1] * 3 + [2] * 6 + COMPLETION_PROMPT)
    # The same history again: all of it is known, nothing is rendered.
    calls = len(backends.tokenizer.calls)
    again = await prepare(engine, create(input=history), SPRINT)
    assert len(backends.tokenizer.calls) == calls
    assert prompt_of(again).tokens == prompt_of(prepared).tokens
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
