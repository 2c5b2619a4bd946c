"""The openai-agents SDK, unmodified, running a one-tool agent loop against the stack."""

from __future__ import annotations

from typing import Any


async def run_weather_agent(stack, *, websocket: bool, model_settings: Any = None):
    """Ask a forecaster agent for Lisbon's weather; (the cities its tool was called
    for, the run's result)."""
    from agents import Agent, ModelSettings, RunConfig, Runner, function_tool
    from agents.models.openai_provider import OpenAIProvider

    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return f"It is sunny in {city}."

    provider = OpenAIProvider(
        api_key=stack.api_key,
        base_url=stack.base_url,
        use_responses=True,
        use_responses_websocket=websocket,
    )
    agent = Agent(
        name="forecaster",
        instructions="Answer with the weather.",
        tools=[get_weather],
        model="turnpike-sim",
        model_settings=model_settings or ModelSettings(),
    )
    try:
        result = await Runner.run(
            agent,
            "What's the weather in Lisbon?",
            run_config=RunConfig(model_provider=provider, tracing_disabled=True),
        )
    finally:
        await provider.aclose()
    return calls, result
