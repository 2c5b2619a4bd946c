"""Structured outputs (``text.format``): the gateway's check and echo of the format, the
simulator's JSON answers (valid for the schema, deterministic per seed, paced and counted
like any text) and the chat completions mapping (``response_format``). The official
clients against the real stack are in ``test_structured_output_clients``."""

from __future__ import annotations

import json
import time
from typing import Any

import jsonschema
import pytest
from support.inference_items import message, output, request
from support.tools import WEATHER_PROTO_TOOL

from turnpike import token_bytes
from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.request import parse_create
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.vocab import harmony_encoding
from turnpike.worker.answer_kinds import AnswerError, FunctionCallAnswer, MessageAnswer
from turnpike.worker.answers import plan_answer
from turnpike.worker.backends import InvalidRequestError
from turnpike.worker.chat_request import MappingError, chat_params
from turnpike.worker.prefix_cache import PrefixCache
from turnpike.worker.simulator import SimulatorBackend

ENCODING = harmony_encoding()
QUESTION = "Extract the event: Ada Lovelace meets Charles Babbage in London on 1833-06-05."


def count_tokens(text: str) -> int:
    return len(ENCODING.encode(text, allowed_special=set(), disallowed_special=()))


def json_schema(schema: dict, *, name: str = "answer", strict: bool = True) -> pb.TextFormat:
    return pb.TextFormat(
        type="json_schema", name=name, schema_json=json.dumps(schema), strict=strict
    )


def answer(text_format: pb.TextFormat | None, items=None, tools=(), choice="", seed=0):
    items = items if items is not None else [message("user", QUESTION)]
    return plan_answer(items, tools, choice, seed, count_tokens, "", text_format)


# Strict schemas as the SDKs send them: every property required, no extra keys.
EVENT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "date": {"type": "string", "format": "date"},
        "participants": {"type": "array", "items": {"type": "string"}, "minItems": 2},
    },
    "required": ["name", "date", "participants"],
    "additionalProperties": False,
}
NESTED = {
    "type": "object",
    "properties": {
        "person": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer", "minimum": 0, "maximum": 130},
                "address": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                    "required": ["city", "zip"],
                    "additionalProperties": False,
                },
            },
            "required": ["name", "age", "address"],
            "additionalProperties": False,
        },
        "scores": {
            "type": "array",
            "items": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "minItems": 3,
            "maxItems": 3,
        },
    },
    "required": ["person", "scores"],
    "additionalProperties": False,
}
ENUMS = {
    "type": "object",
    "properties": {
        "sentiment": {"type": "string", "enum": ["positive", "neutral", "negative"]},
        "priority": {"enum": [1, 2, 3]},
        "confident": {"type": "boolean"},
        "note": {"type": ["string", "null"]},
    },
    "required": ["sentiment", "priority", "confident", "note"],
    "additionalProperties": False,
}
# What pydantic writes: $defs and $ref, Optional as anyOf with null, a recursive model.
PYDANTIC_STYLE = {
    "$defs": {
        "Step": {
            "type": "object",
            "properties": {
                "explanation": {"type": "string"},
                "output": {"type": "string"},
                "substeps": {"type": "array", "items": {"$ref": "#/$defs/Step"}},
            },
            "required": ["explanation", "output", "substeps"],
            "additionalProperties": False,
        }
    },
    "type": "object",
    "properties": {
        "steps": {"type": "array", "items": {"$ref": "#/$defs/Step"}},
        "final_answer": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    },
    "required": ["steps", "final_answer"],
    "additionalProperties": False,
}
# Not strict: optional properties, no additionalProperties, a oneOf.
LOOSE = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "minLength": 3, "maxLength": 40},
        "quantity": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
        "labels": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
    },
    "required": ["title"],
}
SCHEMAS = {"event": EVENT, "nested": NESTED, "enums": ENUMS, "pydantic": PYDANTIC_STYLE}


# ---- the simulator's answer (pure) -----------------------------------------------------


@pytest.mark.parametrize("name", list(SCHEMAS))
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_strict_schema_answers_validate(name: str, seed: int) -> None:
    schema = SCHEMAS[name]
    result = answer(json_schema(schema, name=name), seed=seed)
    assert isinstance(result, MessageAnswer)
    value = json.loads(result.text)
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())


def test_values_come_from_the_users_words() -> None:
    value = json.loads(answer(json_schema(EVENT)).text)
    assert value["name"] == "Ada Lovelace"
    assert set(value) == {"name", "date", "participants"}  # nothing beyond the schema
    assert len(value["participants"]) >= 2


def test_loose_schema_answers_validate() -> None:
    result = answer(json_schema(LOOSE, strict=False))
    jsonschema.validate(json.loads(result.text), LOOSE)


def test_the_answer_is_deterministic_per_seed() -> None:
    fmt = json_schema(NESTED)
    assert answer(fmt, seed=3).text == answer(fmt, seed=3).text
    assert answer(json_schema(ENUMS), seed=3).text == answer(json_schema(ENUMS), seed=3).text


def test_json_object_is_a_small_object() -> None:
    result = answer(pb.TextFormat(type="json_object"))
    value = json.loads(result.text)
    assert isinstance(value, dict) and isinstance(value["answer"], str) and value["answer"]
    assert count_tokens(result.text) < 100


def test_text_format_text_or_unset_is_prose() -> None:
    for fmt in (None, pb.TextFormat(), pb.TextFormat(type="text")):
        text = answer(fmt).text
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)


def test_a_tool_call_still_wins_when_tools_apply() -> None:
    items = [message("user", "What is the weather in Paris?")]
    result = answer(json_schema(EVENT), items=items, tools=[WEATHER_PROTO_TOOL])
    assert isinstance(result, FunctionCallAnswer) and result.name == "get_weather"
    result = answer(json_schema(EVENT), items=items, tools=[WEATHER_PROTO_TOOL], choice="none")
    jsonschema.validate(json.loads(result.text), EVENT)


def test_the_answer_after_a_tool_ran_is_structured() -> None:
    items = [
        message("user", "What is the weather in Paris?"),
        cv.Item(kind=cv.Item.FUNCTION_CALL, call_id="call_1", name="get_weather", arguments="{}"),
        output("call_1", '{"temperature": 21, "sky": "sunny"}'),
    ]
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "temperature": {"type": "integer"}},
        "required": ["city", "temperature"],
        "additionalProperties": False,
    }
    result = answer(json_schema(schema), items=items, tools=[WEATHER_PROTO_TOOL])
    value = json.loads(result.text)
    jsonschema.validate(value, schema)
    assert value["temperature"] == 21  # taken from the tool's output
    result = answer(pb.TextFormat(type="json_object"), items=items, tools=[WEATHER_PROTO_TOOL])
    assert isinstance(json.loads(result.text), dict)


def test_bad_formats_are_client_errors() -> None:
    with pytest.raises(AnswerError, match="invalid schema"):
        answer(pb.TextFormat(type="json_schema", name="x", schema_json="{nope"))
    with pytest.raises(AnswerError, match="must be a JSON Schema object"):
        answer(pb.TextFormat(type="json_schema", name="x", schema_json="[1]"))
    with pytest.raises(AnswerError, match="text format type"):
        answer(pb.TextFormat(type="yaml"))


# ---- the simulator's stream ------------------------------------------------------------


def sim_request(text_format: pb.TextFormat, *, tps: float = 4000.0, max_output_tokens=0):
    return pb.GenerateRequest(
        request_id="resp_1",
        model="turnpike-sim",
        prompt=token_bytes.pack(range(50)),
        items=[message("user", QUESTION)],
        sampling=pb.SamplingParams(seed=5, max_output_tokens=max_output_tokens),
        tokens_per_second=tps,
        ttft_ms=1.0,
        prefill_tokens_per_second=1_000_000.0,
        text_format=text_format,
    )


async def run(req: pb.GenerateRequest) -> list[pb.GenerateEvent]:
    backend = SimulatorBackend("worker-test", PrefixCache(1_000_000))
    return [event async for event in backend.generate(req)]


async def test_the_stream_is_a_message_of_schema_valid_json_paced_and_counted() -> None:
    started = time.monotonic()
    events = await run(sim_request(json_schema(NESTED), tps=400.0))
    elapsed = time.monotonic() - started
    assert events[0].item_started.kind == pb.ItemStarted.MESSAGE
    deltas = [e.delta for e in events if e.HasField("delta")]
    text = "".join(d.text for d in deltas)
    jsonschema.validate(json.loads(text), NESTED)
    finished = events[-1].finished
    assert finished.finish_reason == "stop"
    assert finished.usage.output_tokens == sum(d.tokens for d in deltas) == count_tokens(text)
    assert len(deltas) > 1  # streamed in pieces, not one blob
    # Paced at 400 tokens/s: decoding the rest after the first token takes its time.
    assert elapsed >= (finished.usage.output_tokens - 1) / 400.0 * 0.9


async def test_max_output_tokens_cuts_the_json_with_finish_reason_length() -> None:
    events = await run(sim_request(json_schema(PYDANTIC_STYLE), max_output_tokens=16))
    finished = events[-1].finished
    assert finished.finish_reason == "length" and finished.usage.output_tokens == 16


async def test_an_unparsable_schema_is_an_invalid_request() -> None:
    bad = pb.TextFormat(type="json_schema", name="x", schema_json="{")
    with pytest.raises(InvalidRequestError, match="invalid schema"):
        await run(sim_request(bad))


# ---- the gateway: check, echo and pass on ------------------------------------------------


def parse(text: dict):
    return parse_create({"input": "hi", "text": text}, default_model="turnpike-sim")


def test_json_schema_format_is_echoed_whole_and_sent_to_the_worker() -> None:
    req = parse({"format": {"type": "json_schema", "name": "event", "schema": EVENT}})
    assert req.text["format"] == {
        "type": "json_schema",
        "name": "event",
        "description": None,
        "schema": EVENT,
        "strict": False,
    }
    sent = req.proto_text_format
    assert (sent.type, sent.name, sent.strict) == ("json_schema", "event", False)
    assert json.loads(sent.schema_json) == EVENT
    assert list(json.loads(sent.schema_json)["properties"]) == list(EVENT["properties"])

    req = parse(
        {
            "format": {
                "type": "json_schema",
                "name": "event",
                "description": "An event.",
                "schema": EVENT,
                "strict": True,
            }
        }
    )
    sent = req.proto_text_format
    assert (sent.description, sent.strict) == ("An event.", True)


def test_json_object_and_text_formats_reach_the_worker_by_type() -> None:
    assert parse({"format": {"type": "json_object"}}).proto_text_format.type == "json_object"
    assert parse({"format": {"type": "text"}}).proto_text_format.type == "text"
    plain = parse_create({"input": "hi"}, default_model="turnpike-sim")
    assert plain.proto_text_format == pb.TextFormat(type="text")


@pytest.mark.parametrize(
    ("fmt", "param", "code"),
    [
        (
            {"type": "json_schema", "schema": EVENT},
            "text.format.name",
            "missing_required_parameter",
        ),
        ({"type": "json_schema", "name": "x"}, "text.format.schema", "missing_required_parameter"),
        (
            {"type": "json_schema", "name": "a b", "schema": EVENT},
            "text.format.name",
            "invalid_value",
        ),
        ({"type": "json_schema", "name": "x", "schema": []}, "text.format.schema", "invalid_type"),
        (
            {"type": "json_schema", "name": "x", "schema": EVENT, "strict": "yes"},
            "text.format.strict",
            "invalid_type",
        ),
    ],
)
def test_bad_json_schema_formats_are_400_naming_the_parameter(fmt, param, code) -> None:
    with pytest.raises(ApiError) as caught:
        parse({"format": fmt})
    assert caught.value.status == 400
    assert (caught.value.param, caught.value.code) == (param, code)


# ---- chat completions backends: response_format ------------------------------------------


def test_json_schema_becomes_response_format() -> None:
    fmt = pb.TextFormat(
        type="json_schema",
        name="event",
        description="An event.",
        schema_json=json.dumps(EVENT),
        strict=True,
    )
    params = chat_params(request(text_format=fmt))
    assert params["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "event",
            "description": "An event.",
            "schema": EVENT,
            "strict": True,
        },
    }
    fmt = json_schema(LOOSE, name="loose", strict=False)
    assert chat_params(request(text_format=fmt))["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "loose", "schema": LOOSE, "strict": False},
    }


def test_json_object_becomes_response_format_and_text_sends_none() -> None:
    params = chat_params(request(text_format=pb.TextFormat(type="json_object")))
    assert params["response_format"] == {"type": "json_object"}
    assert "response_format" not in chat_params(request(text_format=pb.TextFormat(type="text")))
    assert "response_format" not in chat_params(request())


@pytest.mark.parametrize(
    ("fmt", "match"),
    [
        (pb.TextFormat(type="json_schema", name="x", schema_json="{"), "schema is not JSON"),
        (pb.TextFormat(type="json_schema", schema_json="{}"), "needs a name"),
        (pb.TextFormat(type="yaml"), "unsupported text format"),
    ],
)
def test_formats_that_cannot_be_mapped(fmt, match) -> None:
    with pytest.raises(MappingError, match=match):
        chat_params(request(text_format=fmt))
