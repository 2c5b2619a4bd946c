"""A real model behind the OpenAI-compatible backend (issue 23): llama.cpp's server with
Gemma 3 270M (the image `make image-llamacpp` builds), and a local stack whose workers
point at it. One streamed answer, one structured output, one cancellation, and the usage
in the ledger, all through the official SDK. `make test-llamacpp` runs it (after building
the image); `make test` does not, since a cold build of the server takes minutes.

The counts checked are the server's own: the prompt as its chat template renders it and
its tokenizer counts it, never Turnpike's o200k renderer."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI
from openai.types.responses import FunctionToolParam
from support.procs import free_port

from turnpike.devstack import LocalStack, StackConfig, StackEndpoints
from turnpike.devstack.llamacpp import SERVED_AS, LlamaServer, LlamaServerError

MODEL = "self-hosted"  # the router's entry for the OpenAI-compatible backend
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """The model's container on a free loopback port: its base URL."""
    llama = LlamaServer(port=free_port())
    try:
        llama.start()
    except LlamaServerError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield llama.base_url
    finally:
        llama.stop()


def stack_on(server: str, **env: str) -> Iterator[StackEndpoints]:
    base = {
        "TURNPIKE_OPENAI_COMPAT_BASE_URL": f"{server}/v1",
        "TURNPIKE_OPENAI_COMPAT_MODEL": SERVED_AS,
    }
    local = LocalStack(StackConfig.private(extra_env={**base, **env}))
    local.start()
    try:
        yield local.endpoints
    finally:
        local.stop()


@pytest.fixture(scope="module")
def real_stack(server: str) -> Iterator[StackEndpoints]:
    """Calls asked as tools, as for a model whose template makes them."""
    yield from stack_on(server)


@pytest.fixture(scope="module")
def json_calls_stack(server: str) -> Iterator[StackEndpoints]:
    """Required calls asked as JSON, as `make run LLAMACPP=1` and Compose deploy it."""
    yield from stack_on(server, TURNPIKE_OPENAI_COMPAT_CALLS_AS_JSON="true")


@pytest.fixture(scope="module")
def client(real_stack: StackEndpoints) -> Iterator[OpenAI]:
    with OpenAI(base_url=real_stack.base_url, api_key=real_stack.api_key, max_retries=0) as c:
        yield c


def prompt_tokens(server: str, text: str) -> int:
    """What the server counts for one user message: its template, then its tokenizer."""
    messages = [{"role": "user", "content": text}]
    prompt = httpx.post(f"{server}/apply-template", json={"messages": messages}).json()["prompt"]
    tokens = httpx.post(f"{server}/tokenize", json={"content": prompt, "add_special": True})
    return len(tokens.json()["tokens"])


def usage_totals(stack: StackEndpoints) -> dict:
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    return httpx.get(f"{stack.base_url}/usage", headers=headers, timeout=10).json()


def test_the_router_lists_the_real_model(client: OpenAI) -> None:
    assert MODEL in {m.id for m in client.models.list()}


def test_a_streamed_answer_carries_the_servers_token_counts_into_the_ledger(
    client: OpenAI, real_stack: StackEndpoints, server: str
) -> None:
    question = "Write one sentence about the sea."
    before = usage_totals(real_stack)
    deltas, final = [], None
    for event in client.responses.create(
        model=MODEL, input=question, max_output_tokens=24, stream=True
    ):
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type in ("response.completed", "response.incomplete"):
            final = event.response
    assert final is not None and deltas
    assert final.output_text == "".join(deltas)
    usage = final.usage
    assert usage is not None and 0 < usage.output_tokens <= 24
    assert usage.input_tokens == prompt_tokens(server, question)
    deadline = time.monotonic() + 15
    while (after := usage_totals(real_stack))["responses"] == before["responses"]:
        assert time.monotonic() < deadline, "no usage record"
        time.sleep(0.2)
    assert after["input_tokens"] - before["input_tokens"] == usage.input_tokens
    assert after["output_tokens"] - before["output_tokens"] == usage.output_tokens


def test_a_structured_output_is_valid_by_the_servers_grammar(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input="Name a city and its population.",
        text={"format": {"type": "json_schema", "name": "city", "schema": SCHEMA, "strict": True}},
        max_output_tokens=64,
    )
    answer = json.loads(response.output_text)
    assert set(answer) == {"city", "population"}
    assert isinstance(answer["city"], str) and isinstance(answer["population"], int)


def test_a_client_that_leaves_stops_the_servers_generation(client: OpenAI, server: str) -> None:
    stream = client.responses.create(
        model=MODEL, input="Tell a very long story.", max_output_tokens=2000, stream=True
    )
    for seen, _ in enumerate(stream):
        if seen == 8:
            break
    stream.close()
    deadline = time.monotonic() + 10
    while any(slot["is_processing"] for slot in httpx.get(f"{server}/slots").json()):
        assert time.monotonic() < deadline, "the server still generates for a client gone"
        time.sleep(0.2)


def test_input_tokens_of_a_model_this_gateway_does_not_render_is_a_clear_400(
    real_stack: StackEndpoints,
) -> None:
    """Turnpike's renderer would count o200k tokens of its own prompt format: a number
    the server never sees (63 against its 30 for one short question)."""
    reply = httpx.post(
        f"{real_stack.base_url}/responses/input_tokens",
        json={"model": MODEL, "input": "Write one sentence about the sea."},
        headers={"Authorization": f"Bearer {real_stack.api_key}"},
        timeout=30,
    )
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert (error["code"], error["param"]) == ("unsupported_model", "model")


def test_a_required_tool_call_the_model_does_not_make_fails_clearly_and_is_billed(
    client: OpenAI, real_stack: StackEndpoints
) -> None:
    """This base model's template offers no tools: with tool_choice "required" it answers
    in text. An answer that ends by itself without the call is a failed response naming
    the cause, not a message that looks like an answer; what the model generated is
    still billed. (Left to itself this model writes until the token limit: an incomplete
    response, which is what it is. A json_schema format makes it end by itself.)"""
    tool: FunctionToolParam = {
        "type": "function",
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "strict": False,
    }
    before = usage_totals(real_stack)
    response = client.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=[tool],
        tool_choice="required",
        text={"format": {"type": "json_schema", "name": "city", "schema": SCHEMA, "strict": True}},
        max_output_tokens=128,
    )
    assert response.status == "failed"
    assert response.error is not None and response.error.code == "tool_choice_not_followed"
    assert response.usage is not None and response.usage.output_tokens > 0
    deadline = time.monotonic() + 15
    while usage_totals(real_stack)["responses"] == before["responses"]:
        assert time.monotonic() < deadline, "the failed response was not billed"
        time.sleep(0.2)


def test_a_required_call_asked_as_json_is_a_call_the_tools_allow(
    json_calls_stack: StackEndpoints,
) -> None:
    """The same model makes the call when the worker asks for it as JSON: the server's
    grammar allows only {name, arguments} of an offered tool."""
    tool: FunctionToolParam = {
        "type": "function",
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    }
    with OpenAI(base_url=json_calls_stack.base_url, api_key=json_calls_stack.api_key) as c:
        response = c.responses.create(
            model=MODEL,
            input="What is the weather in Paris?",
            tools=[tool],
            tool_choice="required",
            max_output_tokens=96,
        )
    assert response.status == "completed", response
    [call] = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_weather"
    arguments = json.loads(call.arguments)
    assert set(arguments) == {"city"} and isinstance(arguments["city"], str)
