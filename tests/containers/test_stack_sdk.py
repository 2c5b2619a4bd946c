"""The official openai SDK, unmodified, against the container stack on its published
port: HTTP, Server-Sent Events and WebSocket, with a function-call loop."""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from openai import OpenAI
from support.compose_services import STACK_SERVICES
from support.tools import WEATHER_TOOL, only_call, tool_result


@pytest.fixture(scope="module")
def client(container_stack):
    with OpenAI(
        base_url=container_stack.base_url,
        api_key=container_stack.keys["sdk"],
        max_retries=0,
        timeout=60,
    ) as sdk:
        yield sdk


def test_the_stack_came_up_healthy_with_every_service(container_stack):
    states = {s.service: s for s in container_stack.compose.states()}
    assert set(states) == STACK_SERVICES
    assert all(s.status == "running" and s.health == "healthy" for s in states.values()), states
    ready = httpx.get(f"{container_stack.gateway}/readyz", timeout=10)
    assert ready.status_code == 200 and ready.json()["ready"] is True


def test_models_are_listed(client):
    assert {"turnpike-sim", "turnpike-sim-65", "turnpike-sim-4000"} <= {
        m.id for m in client.models.list()
    }


def test_http_function_call_loop(client):
    first = client.responses.create(
        model="turnpike-sim", input="What is the weather in Paris?", tools=[WEATHER_TOOL]
    )
    assert first.status == "completed"
    call = only_call(first)
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), WEATHER_TOOL["parameters"])

    second = client.responses.create(
        model="turnpike-sim",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}],
        tools=[WEATHER_TOOL],
    )
    assert second.status == "completed"
    assert second.previous_response_id == first.id
    assert "sunny" in second.output_text
    assert client.responses.retrieve(second.id).id == second.id


def test_sse_stream_ends_with_the_final_response(client):
    seen = []
    with client.responses.stream(
        model="turnpike-sim", input="What is the weather in Lisbon?", tools=[WEATHER_TOOL]
    ) as stream:
        for event in stream:
            seen.append(event.type)
        final = stream.get_final_response()
    assert seen[0] == "response.created" and seen[-1] == "response.completed"
    assert only_call(final).name == "get_weather"


def test_websocket_function_call_loop_on_one_socket(client):
    with client.responses.connect() as conn:

        def turn(**body):
            conn.response.create(model="turnpike-sim", tools=[WEATHER_TOOL], **body)
            for event in conn:
                if event.type in ("response.completed", "response.failed", "error"):
                    return event
            raise AssertionError("the socket closed before the terminal event")

        done = turn(input="Weather in Oslo?")
        assert done.type == "response.completed", done
        previous = done.response
        for i in range(2):
            call = only_call(previous)
            done = turn(
                previous_response_id=previous.id,
                input=tool_result(call.call_id, f"rain {i}", f"And in city number {i}?"),
            )
            assert done.type == "response.completed", done
            assert done.response.previous_response_id == previous.id
            previous = done.response
        conn.response.create(
            model="turnpike-sim",
            previous_response_id=previous.id,
            input=[
                {
                    "type": "function_call_output",
                    "call_id": only_call(previous).call_id,
                    "output": "snow",
                }
            ],
        )
        for event in conn:
            if event.type in ("response.completed", "response.failed", "error"):
                break
        assert event.type == "response.completed", event
        assert "snow" in event.response.output_text


def test_with_the_redis_profile_responses_live_in_redis(client, container_stack):
    """The optional tier is one flag away: with the profile on, the gateway stores each
    response in Redis, scoped by tenant, and continues conversations from there."""
    first = client.responses.create(model="turnpike-sim-4000", input="remember me")
    follow = client.responses.create(
        model="turnpike-sim-4000", previous_response_id=first.id, input="and now?"
    )
    assert follow.previous_response_id == first.id
    keys = container_stack.compose.run(
        "exec",
        "-T",
        "redis",
        "redis-cli",
        "--scan",
        "--pattern",
        "turnpike:response:*",
        capture=True,
    ).stdout
    assert f":{first.id}" in keys and f":{follow.id}" in keys
