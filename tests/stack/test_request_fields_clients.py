"""The small request fields through the official openai SDK against the running stack,
over HTTP and WebSocket: tool_choice in all its forms, max_tool_calls and
parallel_tool_calls, text.verbosity, service_tier, prompt_cache_key and its retention,
safety_identifier, metadata limits, input_file parts (text and PDF), truncation, and
the fields this server refuses."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.types.responses import ResponseInputItemParam
from support.openresponses import validate_response_object
from support.pdf import minimal_pdf
from support.sdk import response_usage, turnpike_fields
from support.tools import READ_FILE_TOOL, WEATHER_TOOL
from support.wire import TERMINAL

pytestmark = pytest.mark.stack

MODEL = "turnpike-sim"
QUESTION = "What is the weather in Paris?"
TOOLS = [WEATHER_TOOL, READ_FILE_TOOL]


@pytest.fixture(scope="module")
def client(stack):
    with OpenAI(base_url=stack.base_url, api_key=stack.api_key, max_retries=0, timeout=120) as c:
        yield c


class Refused(Exception):
    def __init__(self, status: int, error: dict[str, Any]) -> None:
        super().__init__(error)
        self.status, self.error = status, error


def over_http(client: OpenAI, **body) -> dict[str, Any]:
    try:
        response = client.responses.create(model=MODEL, **body)
    except openai.APIStatusError as err:
        assert isinstance(err.body, dict), err.body
        raise Refused(err.status_code, err.body) from None
    return response.model_dump(mode="json", exclude_unset=True)


def over_websocket(client: OpenAI, **body) -> dict[str, Any]:
    with client.responses.connect() as conn:
        conn.response.create(model=MODEL, **body)
        for event in conn:
            if event.type == "error":
                data = event.model_dump()
                raise Refused(data.get("status") or 400, data.get("error") or data)
            if event.type in TERMINAL:
                return event.response.model_dump(mode="json", exclude_unset=True)
    raise AssertionError("socket closed before the terminal event")


TRANSPORTS = {"http": over_http, "websocket": over_websocket}


class Create:
    """Create requests over one transport: ``create(**body)`` is the response (checked
    against the spec), ``create.refused(**body)`` the error."""

    def __init__(self, client: OpenAI, send: Callable[..., dict[str, Any]]) -> None:
        self.client, self.send = client, send

    def __call__(self, **body: Any) -> dict[str, Any]:
        response = self.send(self.client, **body)
        validate_response_object(response)
        return response

    def refused(self, **body: Any) -> dict[str, Any]:
        with pytest.raises(Refused) as err:
            self.send(self.client, **body)
        return err.value.error


@pytest.fixture(params=list(TRANSPORTS))
def create(request, client) -> Create:
    return Create(client, TRANSPORTS[request.param])


def calls(response: dict) -> list[str]:
    return [item["name"] for item in response["output"] if item["type"] == "function_call"]


def text(response: dict) -> str:
    return "".join(
        part.get("text", "")
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


# ---- tool_choice, max_tool_calls, parallel_tool_calls ----------------------------------


@pytest.mark.parametrize(
    ("choice", "called"),
    [
        ("none", []),
        ("auto", ["get_weather"]),
        ("required", ["get_weather"]),
        ({"type": "function", "name": "read_file"}, ["read_file"]),
        (
            {
                "type": "allowed_tools",
                "mode": "auto",
                "tools": [{"type": "function", "name": "read_file"}],
            },
            ["read_file"],
        ),
        (
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "get_weather"}],
            },
            ["get_weather"],
        ),
    ],
    ids=["none", "auto", "required", "function", "allowed-auto", "allowed-required"],
)
def test_tool_choice_is_honoured(create, choice, called) -> None:
    response = create(input=QUESTION, tools=TOOLS, tool_choice=choice)
    assert response["status"] == "completed"
    assert calls(response) == called
    assert response["tool_choice"] == choice
    if not called:
        assert text(response)


def test_required_calls_even_after_a_tool_ran(client) -> None:
    first = over_http(client, input=QUESTION, tools=TOOLS)
    [call] = [i for i in first["output"] if i["type"] == "function_call"]
    follow_up = {"type": "function_call_output", "call_id": call["call_id"], "output": "21C"}
    after = over_http(client, previous_response_id=first["id"], input=[follow_up], tools=TOOLS)
    assert calls(after) == [] and "21C" in text(after)
    forced = over_http(
        client,
        previous_response_id=first["id"],
        input=[follow_up],
        tools=TOOLS,
        tool_choice="required",
    )
    assert len(calls(forced)) == 1


def test_an_unknown_tool_choice_name_is_a_400(create) -> None:
    error = create.refused(
        input=QUESTION, tools=TOOLS, tool_choice={"type": "function", "name": "nope"}
    )
    assert error["param"] == "tool_choice.name"
    error = create.refused(
        input=QUESTION,
        tools=TOOLS,
        tool_choice={
            "type": "allowed_tools",
            "mode": "auto",
            "tools": [{"type": "function", "name": "nope"}],
        },
    )
    assert error["param"] == "tool_choice.tools[0].name"


def test_call_limits_are_echoed_and_held(create) -> None:
    response = create(input=QUESTION, tools=TOOLS, max_tool_calls=1, parallel_tool_calls=False)
    assert len(calls(response)) == 1
    assert (response["max_tool_calls"], response["parallel_tool_calls"]) == (1, False)
    assert (
        create.refused(input=QUESTION, tools=TOOLS, max_tool_calls=0)["param"] == "max_tool_calls"
    )


# ---- text.verbosity, service_tier, caching and identity fields -------------------------


def test_verbosity_sets_the_answer_length(create) -> None:
    lengths = {}
    for verbosity in ("low", "medium", "high"):
        response = create(input="Tell me about tides", text={"verbosity": verbosity})
        assert response["text"]["verbosity"] == verbosity
        lengths[verbosity] = response["usage"]["output_tokens"]
    assert lengths["low"] < lengths["medium"] < lengths["high"]


@pytest.mark.parametrize(
    ("asked", "reported"), [("auto", "default"), ("flex", "flex"), ("priority", "priority")]
)
def test_service_tier_is_echoed_as_used(create, asked, reported) -> None:
    assert create(input="hi", service_tier=asked)["service_tier"] == reported


def test_identity_and_cache_fields_are_echoed(create) -> None:
    response = create(
        input="hi",
        safety_identifier="user-hash-1",
        prompt_cache_key="project-7",
        prompt_cache_retention="24h",
        metadata={"k": "v"},
    )
    assert response["safety_identifier"] == "user-hash-1"
    assert response["prompt_cache_key"] == "project-7"
    assert response["prompt_cache_retention"] == "24h"
    assert response["metadata"] == {"k": "v"}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"safety_identifier": "u" * 65}, "safety_identifier"),
        ({"prompt_cache_key": "k" * 65}, "prompt_cache_key"),
        ({"prompt_cache_retention": "forever"}, "prompt_cache_retention"),
        ({"service_tier": "scale"}, "service_tier"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata.k"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"moderation": {"model": "omni-moderation-latest"}}, "moderation"),
    ],
)
def test_bad_small_fields_are_400s_naming_the_parameter(create, body, param) -> None:
    error = create.refused(input="hi", **body)
    assert error["param"] == param and error["message"]


def test_requests_sharing_a_prompt_cache_key_go_to_one_worker(client) -> None:
    workers = set()
    for i in range(4):
        response = client.responses.create(
            model=MODEL, input=f"question {i}", prompt_cache_key="shared-prefix"
        )
        workers.add(turnpike_fields(response)["worker_id"])
    assert len(workers) == 1


def test_a_prompt_cache_key_is_tenant_scoped(stack) -> None:
    """The same key and prompt from another tenant finds none of the first's cache."""
    prompt = "The shared system prompt of a long agent session. " * 60

    def ask(key: str) -> dict:
        with OpenAI(base_url=stack.base_url, api_key=stack.api_keys[key], max_retries=0) as c:
            return c.responses.create(
                model=MODEL, input=prompt, prompt_cache_key="same-key"
            ).model_dump()

    first, again = ask("alice"), ask("alice")
    other = ask("bob")
    assert first["usage"]["input_tokens"] == other["usage"]["input_tokens"]
    assert again["usage"]["input_tokens_details"]["cached_tokens"] > 0
    assert other["usage"]["input_tokens_details"]["cached_tokens"] == 0


# ---- input_file ----------------------------------------------------------------------------


def file_part(filename: str, mime: str, payload: bytes) -> dict:
    data = base64.b64encode(payload).decode()
    return {"type": "input_file", "filename": filename, "file_data": f"data:{mime};base64,{data}"}


def with_file(part: dict, question: str = "Summarise the attached file.") -> list[dict]:
    return [{"role": "user", "content": [part, {"type": "input_text", "text": question}]}]


@pytest.mark.parametrize(
    ("filename", "mime", "payload"),
    [
        ("notes.md", "text/markdown", b"# Zanzibar spice markets\n\nCloves and nutmeg."),
        (
            "report.pdf",
            "application/pdf",
            minimal_pdf("Zanzibar spice markets sell cloves and nutmeg"),
        ),
    ],
    ids=["markdown", "pdf"],
)
def test_an_inline_file_is_read_into_the_prompt(create, client, filename, mime, payload) -> None:
    plain = create(input=with_file({"type": "input_text", "text": "-"}))
    response = create(input=with_file(file_part(filename, mime, payload)))
    assert response["status"] == "completed"
    assert response["usage"]["input_tokens"] > plain["usage"]["input_tokens"] + 5
    if response["store"]:
        items = client.responses.input_items.list(response["id"]).data
        [stored] = [p for p in items[0].content if p.type == "input_file"]
        assert stored.filename == filename and "Zanzibar" in stored.model_extra["text"]


@pytest.mark.parametrize(
    ("part", "param"),
    [
        (
            {"type": "input_file", "filename": "a.txt", "file_data": "data:text/plain;base64,@@@"},
            "file_data",
        ),
        (file_part("a.png", "image/png", b"\x89PNG"), "file_data"),
        (file_part("a.pdf", "application/pdf", b"%PDF-1.4 broken"), "file_data"),
        ({"type": "input_file", "file_id": "file-123"}, "file_id"),
        ({"type": "input_file", "file_url": "https://example.com/a.pdf"}, "file_url"),
    ],
    ids=["bad-base64", "image", "corrupt-pdf", "file-id", "file-url"],
)
def test_a_bad_file_is_a_400_naming_the_part(create, part, param) -> None:
    error = create.refused(input=with_file(part))
    assert error["param"] == f"input[0].content[0].{param}"


# ---- truncation -----------------------------------------------------------------------------


def long_input() -> list[ResponseInputItemParam]:
    """About 140,000 tokens (over the simulators' 131,072-token window) under 1 MiB:
    two long user messages, then the question."""
    return [
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": "alpha " * 100_000},
        {"role": "user", "content": "beta " * 40_000},
        {"role": "user", "content": "What came before?"},
    ]


def test_an_over_long_input_is_refused_unless_truncation_is_auto(stack) -> None:
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    url = f"{stack.base_url}/responses"
    body = {"model": MODEL, "input": long_input()}
    refused = httpx.post(url, json=body, headers=headers, timeout=120)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "input")

    with OpenAI(
        base_url=stack.base_url, api_key=stack.api_key, max_retries=0, timeout=120
    ) as client:
        response = client.responses.create(model=MODEL, input=long_input(), truncation="auto")
        assert response.status == "completed" and response.truncation == "auto"
        dropped = turnpike_fields(response)["truncation"]
        assert len(dropped["dropped_items"]) == 1
        assert dropped["input_tokens_before"] > 131_072
        assert 40_000 < response_usage(response).input_tokens < 60_000
        # The stored input keeps every item; only the model's prompt lost the oldest.
        assert len(client.responses.input_items.list(response.id, limit=10).data) == 4


def test_truncation_over_websocket_and_its_follow_up(client) -> None:
    """The connection's next turn renders the whole chain anew (the truncated render
    covers only what was kept) and truncates it again."""
    first = over_websocket(client, input=long_input(), truncation="auto")
    assert first["status"] == "completed"
    assert len(first["turnpike"]["truncation"]["dropped_items"]) == 1
    with client.responses.connect() as conn:
        previous: dict | None = None
        for body in (
            {"input": long_input(), "truncation": "auto"},
            {"input": "And now?", "truncation": "auto"},
        ):
            if previous is not None:
                body["previous_response_id"] = previous["id"]
            conn.response.create(model=MODEL, **body)
            for event in conn:
                if event.type in TERMINAL:
                    break
            assert event.type == "response.completed", event
            previous = event.response.model_dump(mode="json", exclude_unset=True)
            validate_response_object(previous)
            assert previous["turnpike"]["truncation"]["dropped_items"]
            assert previous["usage"]["input_tokens"] < 131_072


@pytest.mark.parametrize("pipeline", ["legacy", "sprint", "connection"])
def test_the_fields_reach_the_worker_on_every_pipeline(client, pipeline) -> None:
    """Each pipeline (the legacy one through the image-resolution hop) hands the worker
    the allowed tools, the call limit and the verbosity."""
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "read_file"}],
    }
    response = client.responses.create(
        model=MODEL,
        input=QUESTION,
        tools=TOOLS,
        tool_choice=choice,
        max_tool_calls=1,
        extra_headers={"X-Turnpike-Pipeline": pipeline},
    ).model_dump(mode="json", exclude_unset=True)
    assert response["turnpike"]["pipeline"] == pipeline
    assert calls(response) == ["read_file"]
    lengths = [
        client.responses.create(
            model=MODEL,
            input="Tell me about tides",
            text={"verbosity": verbosity},
            extra_headers={"X-Turnpike-Pipeline": pipeline},
        ).usage.output_tokens
        for verbosity in ("low", "high")
    ]
    assert lengths[0] < lengths[1]
