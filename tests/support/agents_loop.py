"""The openai-agents SDK, unmodified, running a one-tool agent loop against the stack."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest.mock import patch


@contextmanager
def _recording_frames(sent: list[dict[str, Any]]) -> Iterator[None]:
    """Record each ``response.create`` frame the agents' WebSocket model sends (it opens
    its own socket, so no client hook sees them)."""
    from agents.models.openai_responses import OpenAIResponsesWSModel

    original = OpenAIResponsesWSModel._prepare_websocket_request

    async def recording(self, create_kwargs):
        frame, url, headers = await original(self, create_kwargs)
        sent.append(frame)
        return frame, url, headers

    with patch.object(OpenAIResponsesWSModel, "_prepare_websocket_request", recording):
        yield


async def run_weather_agent(
    stack,
    *,
    websocket: bool,
    model_settings: Any = None,
    sent: list[dict[str, Any]] | None = None,
):
    """Ask a forecaster agent for Lisbon's weather; (the cities its tool was called
    for, the run's result). ``sent``, when given, gets each create request's body (HTTP)
    or frame (WebSocket) as the agent sent it."""
    import httpx2  # the openai SDK's HTTP client
    from agents import Agent, ModelSettings, RunConfig, Runner, function_tool
    from agents.models.openai_provider import OpenAIProvider
    from openai import AsyncOpenAI, DefaultAsyncHttpxClient

    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return f"It is sunny in {city}."

    async def record(request: httpx2.Request) -> None:
        if sent is not None and request.url.path.endswith("/responses"):
            sent.append(json.loads(request.content))

    client = AsyncOpenAI(
        api_key=stack.api_key,
        base_url=stack.base_url,
        http_client=DefaultAsyncHttpxClient(event_hooks={"request": [record]}),
    )
    provider = OpenAIProvider(
        openai_client=client, use_responses=True, use_responses_websocket=websocket
    )
    agent = Agent(
        name="forecaster",
        instructions="Answer with the weather.",
        tools=[get_weather],
        model="turnpike-sim",
        model_settings=model_settings or ModelSettings(),
    )
    recording = _recording_frames(sent) if websocket and sent is not None else _nothing()
    try:
        with recording:
            result = await Runner.run(
                agent,
                "What's the weather in Lisbon?",
                run_config=RunConfig(model_provider=provider, tracing_disabled=True),
            )
    finally:
        await provider.aclose()
        await client.close()
    return calls, result


@contextmanager
def _nothing() -> Iterator[None]:
    yield
