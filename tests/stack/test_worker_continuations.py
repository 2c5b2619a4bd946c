"""A WebSocket's turns reach the worker as continuations (only what follows the last
turn's request: turnpike.worker.continuations), and answer as whole requests do: on a
stack whose workers keep nothing, every continuation is unknown, the gateway sends the
whole request to the same worker, and the answers are the same."""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from openai import OpenAI
from support.tools import WEATHER_TOOL

from turnpike.devstack import LocalStack, StackConfig

TURNS: list[Any] = ["What is the weather in Lisbon?", None, "And in Porto, then?", None]


def play(base_url: str, api_key: str) -> list[dict[str, Any]]:
    done: list[dict[str, Any]] = []
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    with client.responses.connect() as conn:
        previous = None
        for turn in TURNS:
            if turn is None:
                call = next(i for i in done[-1]["output"] if i["type"] == "function_call")
                turn = [
                    {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}
                ]
            conn.response.create(
                model="turnpike-sim",
                input=turn,
                tools=[WEATHER_TOOL],
                previous_response_id=previous,
            )
            for event in conn:
                if event.type in ("response.completed", "response.failed", "error"):
                    break
            assert event.type == "response.completed", event
            done.append(event.response.model_dump())
            previous = event.response.id
    return done


def continuations(stack: LocalStack) -> dict[str, float]:
    """What the workers counted, by result, summed."""
    counted: dict[str, float] = {}
    for name, port in stack.config.metrics_port_map().items():
        if not name.startswith("worker"):
            continue
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        for line in text.decode().splitlines():
            if line.startswith("turnpike_worker_continuations_total{"):
                result = line.split('result="', 1)[1].split('"', 1)[0]
                counted[result] = counted.get(result, 0.0) + float(line.rsplit(" ", 1)[1])
    return counted


@pytest.fixture(scope="module")
def forgetful(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack whose workers keep no request."""
    stack = LocalStack(
        StackConfig.private(
            tmp_path_factory.mktemp("forgetful"), extra_env={"TURNPIKE_WORKER_KEPT_BYTES": "0"}
        )
    )
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


def without_ids(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in output]


def test_turns_continue_on_the_worker_and_answer_as_whole_requests(
    local_stack: LocalStack, forgetful: LocalStack
) -> None:
    # Each stack plays the conversation once first, so both prefix caches hold it and
    # cached_tokens compares equal (the shared stack's may already hold it, from another test).
    play(local_stack.endpoints.base_url, local_stack.endpoints.api_key)
    play(forgetful.endpoints.base_url, forgetful.endpoints.api_key)
    forgotten = continuations(forgetful)

    before = continuations(local_stack)
    kept = play(local_stack.endpoints.base_url, local_stack.endpoints.api_key)
    after = continuations(local_stack)
    # Every turn after the first continued the one before it on its worker.
    assert after.get("resolved", 0) - before.get("resolved", 0) == len(TURNS) - 1
    assert after.get("unknown", 0) == before.get("unknown", 0)

    whole = play(forgetful.endpoints.base_url, forgetful.endpoints.api_key)
    assert continuations(forgetful) == {"unknown": forgotten["unknown"] + len(TURNS) - 1}
    for turn, (a, b) in enumerate(zip(kept, whole, strict=True)):
        assert a["usage"] == b["usage"], turn
        assert without_ids(a["output"]) == without_ids(b["output"]), turn
