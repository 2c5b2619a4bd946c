"""The small request fields, below the transports: how the gateway checks them
(turnpike.gateway.protocol.request_fields), what reaches the worker, and what the simulator does with
them (tool_choice in all its forms, max_tool_calls, text.verbosity). The official SDK
against the real stack is in ``test_request_fields_clients``."""

from __future__ import annotations

import json

import pytest
from support.inference_items import call, message, output
from support.tools import READ_FILE_TOOL, WEATHER_TOOL

from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.request import parse_create
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.vocab import harmony_encoding
from turnpike.worker.answer_kinds import FunctionCallAnswer, MessageAnswer
from turnpike.worker.answers import plan_answer
from turnpike.worker.chat_request import chat_params

ENCODING = harmony_encoding()
TOOLS = [WEATHER_TOOL, READ_FILE_TOOL]


def count_tokens(text: str) -> int:
    return len(ENCODING.encode(text, allowed_special=set(), disallowed_special=()))


def parse(**body):
    return parse_create({"model": "m", "input": "hi", **body}, default_model="m")


def refused(**body) -> ApiError:
    with pytest.raises(ApiError) as err:
        parse(**body)
    assert err.value.status == 400
    return err.value


# ---- the gateway's checks -----------------------------------------------------------------


@pytest.mark.parametrize("field", ["prompt", "moderation", "access_programs", "image"])
def test_a_field_this_server_does_not_implement_is_refused_by_name(field) -> None:
    err = refused(**{field: {"id": "x"}})
    assert (err.param, err.code) == (field, "unsupported_parameter")


def test_safely_ignorable_fields_are_accepted() -> None:
    parse(prompt_cache_options={"ttl": "30m"}, stream_options={"include_obfuscation": False})
    assert refused(prompt_cache_options="x").param == "prompt_cache_options"


@pytest.mark.parametrize(
    ("asked", "reported"),
    [
        (None, "default"),
        ("auto", "default"),
        ("default", "default"),
        ("flex", "flex"),
        ("priority", "priority"),
    ],
)
def test_service_tier_reports_the_tier_used(asked, reported) -> None:
    assert parse(service_tier=asked).service_tier == reported


def test_an_unknown_service_tier_is_refused() -> None:
    assert (refused(service_tier="scale").param, refused(service_tier=1).code) == (
        "service_tier",
        "invalid_value",
    )


@pytest.mark.parametrize("field", ["safety_identifier", "prompt_cache_key"])
def test_identifiers_are_at_most_64_characters(field) -> None:
    assert getattr(parse(**{field: "u" * 64}), field) == "u" * 64
    err = refused(**{field: "u" * 65})
    assert (err.param, err.code) == (field, "string_above_max_length")
    assert refused(**{field: 7}).param == field


def test_prompt_cache_retention_is_checked() -> None:
    assert parse(prompt_cache_retention="24h").prompt_cache_retention == "24h"
    assert parse(prompt_cache_retention="in_memory").prompt_cache_retention == "in_memory"
    assert parse().prompt_cache_retention is None
    assert refused(prompt_cache_retention="1w").param == "prompt_cache_retention"


def test_max_tool_calls_is_a_positive_integer() -> None:
    assert parse(max_tool_calls=3).max_tool_calls == 3
    assert (refused(max_tool_calls=0).param, refused(max_tool_calls=0).code) == (
        "max_tool_calls",
        "integer_below_min_value",
    )
    assert refused(max_tool_calls=True).param == "max_tool_calls"


def test_metadata_limits_name_the_parameter() -> None:
    assert refused(metadata={f"k{i}": "v" for i in range(17)}).param == "metadata"
    assert refused(metadata={"k" * 65: "v"}).param == "metadata." + "k" * 65
    assert refused(metadata={"k": "v" * 513}).param == "metadata.k"
    assert parse(metadata={f"k{i}": "v" * 512 for i in range(16)}).metadata["k0"] == "v" * 512


def test_client_metadata_is_kept_and_checked() -> None:
    """Codex's ``client_metadata`` (not in the public schema) is accepted and kept."""
    meta = {"ws_request_header_traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}
    assert parse(client_metadata=meta).client_metadata == meta
    assert parse().client_metadata == {}
    for bad in ("x", ["x"], {"k": 1}, {f"k{i}": "v" for i in range(65)}):
        assert refused(client_metadata=bad).param == "client_metadata"


def test_allowed_tools_restrict_what_the_worker_may_call() -> None:
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "read_file"}],
    }
    request = parse(tools=TOOLS, tool_choice=choice)
    assert request.tool_choice == choice
    assert request.tool_choice_name() == "required"
    # The prompt shows both tools; the worker may call only the allowed one.
    assert [t.name for t in request.proto_tools] == ["get_weather", "read_file"]
    assert [t.name for t in request.callable_proto_tools] == ["read_file"]


@pytest.mark.parametrize(
    ("choice", "param"),
    [
        ({"type": "function", "name": "nope"}, "tool_choice.name"),
        (
            {"type": "allowed_tools", "tools": [{"type": "function", "name": "nope"}]},
            "tool_choice.tools[0].name",
        ),
        ({"type": "allowed_tools", "tools": []}, "tool_choice.tools"),
        ({"type": "allowed_tools", "tools": [{"type": "mcp"}]}, "tool_choice.tools[0].type"),
        (
            {
                "type": "allowed_tools",
                "mode": "none",
                "tools": [{"type": "function", "name": "read_file"}],
            },
            "tool_choice.mode",
        ),
        ("sometimes", "tool_choice"),
    ],
)
def test_bad_tool_choices_name_the_parameter(choice, param) -> None:
    assert refused(tools=TOOLS, tool_choice=choice).param == param


def test_verbosity_is_kept_for_the_worker() -> None:
    assert parse(text={"verbosity": "low"}).verbosity == "low"
    assert parse().verbosity == ""
    assert refused(text={"verbosity": "loud"}).param == "text.verbosity"


# ---- the simulator ------------------------------------------------------------------------

WEATHER = cv.Tool(
    name="get_weather",
    description="Current weather for a city.",
    parameters_json=json.dumps(WEATHER_TOOL["parameters"]),
)
READ_FILE = cv.Tool(
    name="read_file",
    description="Read a file.",
    parameters_json=json.dumps(READ_FILE_TOOL["parameters"]),
)
ASK = [message("user", "What is the weather in Paris?")]


def plan(tools=(WEATHER, READ_FILE), choice="auto", items=ASK, **kw):
    return plan_answer(items, tools, choice, 0, count_tokens, **kw)


def test_tool_choice_none_answers_with_a_message() -> None:
    assert isinstance(plan(choice="none"), MessageAnswer)


def test_tool_choice_auto_calls_the_matching_tool() -> None:
    answer = plan()
    assert isinstance(answer, FunctionCallAnswer) and answer.name == "get_weather"


def test_a_named_function_is_called_even_when_another_matches_better() -> None:
    answer = plan(choice="read_file")
    assert isinstance(answer, FunctionCallAnswer) and answer.name == "read_file"


def test_required_calls_a_tool_even_after_a_tool_ran() -> None:
    after = [*ASK, call("c1", "get_weather", "{}"), output("c1", "21C")]
    assert isinstance(plan(choice="auto", items=after), MessageAnswer)
    assert isinstance(plan(choice="required", items=after), FunctionCallAnswer)


def test_allowed_tools_are_the_only_ones_called() -> None:
    """The gateway sends only the allowed tools: the best match among them is called."""
    answer = plan(tools=(READ_FILE,), choice="required")
    assert isinstance(answer, FunctionCallAnswer) and answer.name == "read_file"


def test_no_call_is_allowed_answers_with_a_message() -> None:
    assert isinstance(plan(max_tool_calls=0), MessageAnswer)
    assert isinstance(plan(choice="required", max_tool_calls=0), MessageAnswer)
    assert isinstance(plan(max_tool_calls=1), FunctionCallAnswer)


def message_text(items: list[cv.Item], seed: int, verbosity: str) -> str:
    """The answer's text, with no tool to call: always a message."""
    answer = plan_answer(items, (), "auto", seed, count_tokens, verbosity=verbosity)
    assert isinstance(answer, MessageAnswer), answer
    return answer.text


def test_verbosity_sets_the_length_of_a_plain_answer() -> None:
    for seed in range(5):
        lengths = {v: count_tokens(message_text(ASK, seed, v)) for v in ("low", "medium", "high")}
        assert lengths["low"] < lengths["medium"] < lengths["high"], lengths
        assert lengths["low"] <= 30 and lengths["high"] >= 60
        medium = plan_answer(ASK, (), "auto", seed, count_tokens)
        assert medium == plan_answer(ASK, (), "auto", seed, count_tokens, verbosity="medium")


def test_verbosity_sets_how_many_closing_sentences_follow_a_tool() -> None:
    after = [*ASK, call("c1", "get_weather", "{}"), output("c1", "21C")]
    low = message_text(after, 0, "low")
    high = message_text(after, 0, "high")
    assert len(high) > len(low)


# ---- the chat backends ----------------------------------------------------------------


def chat(**kw) -> dict:
    return chat_params(
        pb.GenerateRequest(
            model="m",
            items=ASK,
            tools=[WEATHER],
            tool_choice="auto",
            parallel_tool_calls=True,
            **kw,
        )
    )


def test_chat_backends_get_the_call_limit_as_they_can_take_it() -> None:
    assert chat()["tool_choice"] == "auto" and chat()["parallel_tool_calls"] is True
    assert chat(max_tool_calls=0)["tool_choice"] == "none"
    assert chat(max_tool_calls=1)["parallel_tool_calls"] is False
    assert chat(max_tool_calls=2)["parallel_tool_calls"] is True


def test_a_prompt_cache_key_routes_within_its_tenant_only() -> None:
    from turnpike.gateway.pipeline.stages.keys import conversation_key

    request = parse(prompt_cache_key="shared")
    alice, bob = conversation_key("alice", request, []), conversation_key("bob", request, [])
    assert alice != bob and alice == conversation_key("alice", parse(prompt_cache_key="shared"), [])


def test_chat_backends_drop_calls_past_max_tool_calls() -> None:
    """Chat completions has no call limit: the calls a hosted model makes past it are
    not passed on."""
    from turnpike.worker.chat_stream import ChunkMapper

    def fragment(index: int, name: str) -> dict:
        call = {"index": index, "id": f"c{index}", "function": {"name": name, "arguments": "{}"}}
        return {"choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}

    mapper = ChunkMapper(max_tool_calls=2)
    events = []
    for index, name in enumerate(["a", "b", "c"]):
        events += mapper.feed(fragment(index, name))
    events += mapper.feed({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    closing, reason, _ = mapper.finish()
    events += closing
    started = [e.item_started.name for e in events if e.HasField("item_started")]
    assert started == ["a", "b"] and reason == "tool_calls"
    assert sum(e.HasField("item_done") for e in events) == 2


async def test_safety_identifier_is_set_on_the_response_span(engine) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from support.gateway_standins import context, create, prepare, response_of
    from support.spans import attributes

    from turnpike.gateway.pipeline.variants import SPRINT

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ctx = context(SPRINT)
    ctx.span = provider.get_tracer("test").start_span("response")
    prepared = await prepare(engine, create(safety_identifier="user-hash-1"), SPRINT, ctx)
    ctx.span.end()
    [span] = exporter.get_finished_spans()
    assert attributes(span)["turnpike.safety_identifier"] == "user-hash-1"
    assert response_of(prepared)["safety_identifier"] == "user-hash-1"


def test_top_logprobs_above_zero_is_refused() -> None:
    assert parse(top_logprobs=0).top_logprobs == 0
    assert (refused(top_logprobs=5).param, refused(top_logprobs=5).code) == (
        "top_logprobs",
        "unsupported_parameter",
    )
    assert refused(top_logprobs=21).code == "invalid_value"


def test_chat_backends_get_the_penalties() -> None:
    sampling = pb.SamplingParams(presence_penalty=0.5, frequency_penalty=-1.0)
    params = chat_params(pb.GenerateRequest(model="m", items=ASK, sampling=sampling))
    assert (params["presence_penalty"], params["frequency_penalty"]) == (0.5, -1.0)
    assert "presence_penalty" not in chat()


def test_the_call_limit_of_a_chat_backend() -> None:
    from turnpike.worker.chat_request import call_limit

    def limit(**kw) -> int | None:
        return call_limit(pb.GenerateRequest(model="m", tools=[WEATHER], **kw))

    assert limit(parallel_tool_calls=True) is None
    assert limit(parallel_tool_calls=False) == 1
    assert limit(parallel_tool_calls=True, max_tool_calls=3) == 3
    assert limit(parallel_tool_calls=False, max_tool_calls=3) == 1
