"""Structured outputs through real clients, unmodified, against the running stack: the
official openai SDK's ``responses.parse`` (and its stream), langchain-openai's
``with_structured_output`` on the Responses API, and pydantic-ai's ``NativeOutput`` with
its Responses model. Each asks with a Pydantic model and must get a validated object."""

from __future__ import annotations

import json
from typing import Literal

import httpx
import jsonschema
import pytest
from langchain_openai import ChatOpenAI
from openai import AsyncOpenAI, OpenAI
from pydantic import BaseModel, Field
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
from support.openresponses import validate_response_object
from support.tools import WEATHER_TOOL

pytestmark = pytest.mark.stack

MODEL = "turnpike-sim"
QUESTION = "Ada Lovelace and Charles Babbage meet in London to discuss the Analytical Engine."


class Address(BaseModel):
    city: str
    country: str


class Person(BaseModel):
    name: str
    age: int = Field(ge=0, le=130)
    address: Address
    role: Literal["engineer", "mathematician", "writer"]


class Meeting(BaseModel):
    """A meeting between people."""

    topic: str
    place: str
    attendees: list[Person] = Field(min_length=2)
    follow_up: str | None


@pytest.fixture(scope="module")
def client(stack):
    with OpenAI(base_url=stack.base_url, api_key=stack.api_key, max_retries=0) as c:
        yield c


# ---- the official openai SDK -------------------------------------------------------------


def test_openai_responses_parse_returns_the_parsed_object(client):
    response = client.responses.parse(model=MODEL, input=QUESTION, text_format=Meeting)
    assert response.status == "completed"
    meeting = response.output_parsed
    assert isinstance(meeting, Meeting) and len(meeting.attendees) >= 2
    assert Meeting.model_validate_json(response.output_text) == meeting
    assert response.text.format.type == "json_schema" and response.text.format.name == "Meeting"
    assert response.usage.output_tokens > 0


def test_openai_responses_parse_is_deterministic_per_seed(client):
    def ask() -> str:
        return client.responses.parse(
            model=MODEL, input=QUESTION, text_format=Meeting, extra_body={"seed": 11}
        ).output_text

    assert ask() == ask()


def test_openai_streamed_parse_gets_the_parsed_object(client):
    with client.responses.stream(model=MODEL, input=QUESTION, text_format=Person) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert len(deltas) > 1
    assert isinstance(final.output_parsed, Person)
    assert Person.model_validate_json("".join(deltas)) == final.output_parsed


def test_openai_websocket_mode_answers_with_the_schema(client):
    schema = Person.model_json_schema()  # as written, not made strict
    text = {"format": {"type": "json_schema", "name": "Person", "schema": schema, "strict": False}}
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, input=QUESTION, text=text)
        done = next(e for e in conn if e.type in ("response.completed", "response.failed", "error"))
    assert done.type == "response.completed", done
    assert isinstance(Person.model_validate_json(done.response.output_text), Person)


def test_raw_json_schema_and_json_object_bodies(client):
    schema = {
        "type": "object",
        "properties": {
            "labels": {"type": "array", "items": {"enum": ["bug", "feature"]}, "minItems": 1},
            "score": {"type": "number", "minimum": 0, "maximum": 1},
        },
        "required": ["labels", "score"],
        "additionalProperties": False,
    }
    text = {"format": {"type": "json_schema", "name": "triage", "schema": schema, "strict": True}}
    raw = client.responses.with_raw_response.create(model=MODEL, input=QUESTION, text=text)
    body = json.loads(raw.http_response.content)
    # Echoed whole, as the API and the SDK's types have it. (The Open Responses spec types
    # the echoed ``schema`` as null, which would drop it; that one field is left out here.)
    assert body["text"]["format"] == {**text["format"], "description": None}
    validate_response_object(
        {**body, "text": {"format": {**body["text"]["format"], "schema": None}}}
    )
    jsonschema.validate(json.loads(raw.parse().output_text), schema)

    response = client.responses.create(
        model=MODEL, input="Reply in JSON.", text={"format": {"type": "json_object"}}
    )
    assert isinstance(json.loads(response.output_text), dict)


def test_a_tool_call_still_comes_first_then_the_structured_answer(client):
    first = client.responses.parse(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=[WEATHER_TOOL],
        text_format=Address,
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert first.output_parsed is None
    second = client.responses.parse(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}],
        tools=[WEATHER_TOOL],
        text_format=Address,
    )
    assert isinstance(second.output_parsed, Address)


def test_a_format_without_a_name_is_a_400_naming_the_parameter(stack):
    # The SDK's types require the name, so the body goes as raw JSON.
    reply = httpx.post(
        f"{stack.base_url}/responses",
        headers={"Authorization": f"Bearer {stack.api_key}"},
        json={"model": MODEL, "input": "hi", "text": {"format": {"type": "json_schema"}}},
    )
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["param"], error["code"]) == ("text.format.name", "missing_required_parameter")


# ---- langchain-openai ------------------------------------------------------------------


def langchain_model(stack) -> ChatOpenAI:
    return ChatOpenAI(
        model=MODEL,
        base_url=stack.base_url,
        api_key=stack.api_key,
        use_responses_api=True,
        max_retries=0,
    )


def test_langchain_with_structured_output_returns_the_model(stack):
    structured = langchain_model(stack).with_structured_output(Meeting)
    meeting = structured.invoke(QUESTION)
    assert isinstance(meeting, Meeting) and len(meeting.attendees) >= 2


async def test_langchain_structured_output_async_with_the_raw_message(stack):
    structured = langchain_model(stack).with_structured_output(Person, include_raw=True)
    result = await structured.ainvoke([("system", "Extract the person."), ("human", QUESTION)])
    assert result["parsing_error"] is None
    assert isinstance(result["parsed"], Person)
    assert result["raw"].usage_metadata["output_tokens"] > 0


def test_langchain_json_mode_returns_a_dict(stack):
    structured = langchain_model(stack).with_structured_output(method="json_mode")
    assert isinstance(structured.invoke("Answer in JSON: what is the Analytical Engine?"), dict)


# ---- pydantic-ai -----------------------------------------------------------------------


def pydantic_ai_agent(stack, output) -> Agent:
    client = AsyncOpenAI(base_url=stack.base_url, api_key=stack.api_key, max_retries=0)
    model = OpenAIResponsesModel(MODEL, provider=OpenAIProvider(openai_client=client))
    return Agent(model, output_type=output)


async def test_pydantic_ai_native_output_returns_the_model(stack):
    agent = pydantic_ai_agent(stack, NativeOutput(Meeting))
    result = await agent.run(QUESTION)
    assert isinstance(result.output, Meeting) and len(result.output.attendees) >= 2
    assert result.usage.output_tokens > 0


async def test_pydantic_ai_native_output_with_base_url_and_api_key(stack):
    provider = OpenAIProvider(base_url=stack.base_url, api_key=stack.api_key)
    agent = Agent(
        OpenAIResponsesModel(MODEL, provider=provider),
        output_type=NativeOutput[Person | Address]([Person, Address]),
    )
    result = await agent.run(QUESTION)
    assert isinstance(result.output, (Person, Address))


async def test_pydantic_ai_native_output_after_a_tool_ran(stack):
    agent = pydantic_ai_agent(stack, NativeOutput(Address))
    ran = []

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the current weather for a city."""
        ran.append(city)
        return f"sunny in {city}, 21 C"

    result = await agent.run("What is the weather in Paris?")
    assert ran and isinstance(result.output, Address)
