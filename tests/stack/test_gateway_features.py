"""What each request carries through the services: images charged as prompt tokens
on every pipeline, safety verdicts, and the time split between model and API."""

from __future__ import annotations

import base64
import io
from typing import Any

import httpx
import pytest
from PIL import Image
from support.openresponses import validate_response_object
from support.tools import READ_FILE_TOOL

pytestmark = pytest.mark.stack


def png_data_url(width: int, height: int) -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def create(stack, body, pipeline=None):
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    if pipeline:
        headers["X-Turnpike-Pipeline"] = pipeline
    return httpx.post(f"{stack.base_url}/responses", json=body, headers=headers, timeout=30)


def image_message(detail: str) -> list[dict]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is in this picture?"},
                {"type": "input_image", "image_url": png_data_url(1024, 1024), "detail": detail},
            ],
        }
    ]


@pytest.mark.parametrize("pipeline", ["legacy", "sprint"])
def test_images_are_charged_as_prompt_tokens_on_every_pipeline(stack, pipeline):
    text_only = create(stack, {"input": "What is in this picture?"}, pipeline).json()
    high = create(stack, {"input": image_message("high")}, pipeline).json()
    low = create(stack, {"input": image_message("low")}, pipeline).json()
    base = text_only["usage"]["input_tokens"]
    # OpenAI's rule: 1024x1024 at high detail is 4 tiles (85 + 4 * 170); low is 85.
    assert high["usage"]["input_tokens"] == base + 765
    assert low["usage"]["input_tokens"] == base + 85
    assert high["turnpike"]["pipeline"] == pipeline


def test_counting_input_tokens_includes_images_as_usage_does(stack):
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    body = {"input": image_message("high")}
    counted = httpx.post(
        f"{stack.base_url}/responses/input_tokens", json=body, headers=headers, timeout=30
    )
    assert counted.status_code == 200, counted.text
    assert counted.json()["input_tokens"] == create(stack, body).json()["usage"]["input_tokens"]


def test_a_broken_image_is_a_clear_400(stack):
    body = {
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_image", "image_url": "data:image/png;base64,bm90IGFuIGltYWdl"}
                ],
            }
        ]
    }
    reply = create(stack, body, "sprint")
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "invalid_image"


def test_abusive_user_message_is_blocked_before_generation(stack):
    reply = create(stack, {"input": "you are a fucking worthless idiot"})
    assert reply.status_code == 400
    error = reply.json()["error"]
    assert error["code"] == "content_policy_violation" and error["param"] == "input"


def test_a_leaked_credential_is_flagged_on_the_response_not_dropped(stack):
    body = {
        "input": "Here is my config: AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE, please check it.",
        "metadata": {"ticket": "42"},
    }
    reply = create(stack, body)
    assert reply.status_code == 200
    response = reply.json()
    validate_response_object(response)
    assert response["metadata"]["ticket"] == "42"
    assert "credential" in response["metadata"]["turnpike_safety_flags"]
    assert "AKIAIOSFODNN7EXAMPLE" not in response["metadata"]["turnpike_safety_flags"]


def test_responses_report_model_time_and_stage_times(stack):
    response = create(stack, {"input": "hello"}).json()
    timings = response["turnpike"]
    assert timings["pipeline"] == "sprint" and timings["worker_id"].startswith("worker-")
    assert (
        timings["model_ms"]["ttft_ms"] > 0
        and timings["model_ms"]["total_ms"] >= timings["model_ms"]["ttft_ms"]
    )
    assert {"safety", "render", "route"} <= set(timings["stages_ms"])


def test_every_pipeline_renders_the_same_prompt_for_the_same_conversation(stack):
    """Caches and appended renders change the cost, never the tokens the model sees."""
    tool = READ_FILE_TOOL
    counts = {}
    for pipeline in ("legacy", "sprint", "connection"):
        previous, prompt_sizes = None, []
        next_input: str | list[dict[str, Any]] = "Fix the failing test in parser.py"
        for _ in range(3):
            body = {"input": next_input, "tools": [tool], "instructions": "You are a coding agent."}
            if previous:
                body["previous_response_id"] = previous["id"]
            previous = create(stack, body, pipeline).json()
            prompt_sizes.append(previous["usage"]["input_tokens"])
            call = next(o for o in previous["output"] if o["type"] == "function_call")
            next_input = [
                {
                    "type": "function_call_output",
                    "call_id": call["call_id"],
                    "output": "def parse():\n    pass\n" * 20,
                },
                {"role": "user", "content": "continue"},
            ]
        counts[pipeline] = prompt_sizes
    assert counts["legacy"] == counts["sprint"] == counts["connection"]
    assert counts["legacy"][0] < counts["legacy"][1] < counts["legacy"][2]


def test_a_resent_history_renders_to_the_same_prompt_as_a_chained_one(stack):
    """Sprint appends to a prefix it finds by content when a client re-sends its history:
    the model must see exactly the tokens a chained client's turn renders to."""
    body = {"instructions": "Prompt identity test.", "input": "Write a haiku about caches."}
    chained = stateless = create(stack, body).json()
    history = [{"role": "user", "content": body["input"]}, *chained["output"]]
    for turn in range(3):
        ask = {"role": "user", "content": f"Another one, number {turn}."}
        chained = create(
            stack, {**body, "input": [ask], "previous_response_id": chained["id"]}
        ).json()
        history.append(ask)
        stateless = create(stack, {**body, "input": history}).json()
        history += stateless["output"]
        assert stateless["usage"]["input_tokens"] == chained["usage"]["input_tokens"]


def test_a_stateless_client_keeps_its_worker(stack):
    """Without previous_response_id, a conversation is routed by how it starts, so the
    full history re-sent every turn lands where its prefix is cached."""
    history = [{"role": "user", "content": "Summarise the design of the router, please."}]
    workers, cached = set(), []
    for turn in range(3):
        response = create(stack, {"input": history, "instructions": "stateless test"}).json()
        workers.add(response["turnpike"]["worker_id"])
        cached.append(response["usage"]["input_tokens_details"]["cached_tokens"])
        history += response["output"] + [{"role": "user", "content": f"And point {turn}?"}]
    assert len(workers) == 1
    assert cached[-1] > 0
