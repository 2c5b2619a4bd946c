"""Background mode through the official SDK against the stack: create and poll, cancel
(billing exactly what was generated), tenants kept apart, and resuming a stream."""

from __future__ import annotations

import json
import time

import httpx
import openai
import pytest
from openai import OpenAI
from support.background import start_long_response, stream_then_drop
from support.openresponses import validate_response_object, validate_stream_event
from support.sdk import message, response_usage, text_of
from support.usage_totals import billed_after, usage_totals

pytestmark = pytest.mark.stack

TERMINAL = {"completed", "incomplete", "failed", "cancelled"}


def client(stack, tenant="dev") -> OpenAI:
    return OpenAI(base_url=stack.base_url, api_key=stack.api_keys[tenant], max_retries=0)


def running_on_workers(stack) -> float:
    """Generations streaming on every worker (their running-requests gauges)."""
    total = 0.0
    for worker in stack.workers:
        page = httpx.get(f"http://{stack.metrics[worker]}/metrics", timeout=10).text
        for line in page.splitlines():
            if line.startswith("turnpike_worker_running_requests{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def replay(stack, response_id: str) -> list[dict]:
    """Every event of a background response, as the server sends them."""
    headers = {"Authorization": f"Bearer {stack.api_keys['dev']}"}
    url = f"{stack.base_url}/responses/{response_id}"
    events = []
    with httpx.stream("GET", url, params={"stream": "true"}, headers=headers, timeout=30) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line[len("data: ") :]))
    return events


def poll(c: OpenAI, response_id: str, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while True:
        response = c.responses.retrieve(response_id)
        if response.status in TERMINAL or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


def test_a_background_response_returns_at_once_and_is_polled_to_completion(stack):
    c = client(stack)
    created = c.responses.create(model="turnpike-sim", input="Write 500 tokens", background=True)
    assert created.background is True
    assert created.status in ("queued", "in_progress")
    assert created.output == []
    done = poll(c, created.id)
    assert done.status == "completed"
    assert done.usage.output_tokens > 100 and done.output[0].content[0].text


def test_background_needs_store(stack):
    with pytest.raises(openai.BadRequestError) as err:
        client(stack).responses.create(
            model="turnpike-sim", input="x", background=True, store=False
        )
    assert err.value.param == "background"


def test_cancelling_stops_generation_and_bills_what_was_generated(stack):
    before = usage_totals(stack, "alice")
    c = client(stack, "alice")
    created, polled = start_long_response(c)
    time.sleep(0.5)
    assert running_on_workers(stack) >= 1
    raw = c.responses.with_raw_response.cancel(created.id).http_response.json()
    validate_response_object(raw)
    cancelled = c.responses.retrieve(created.id)
    assert cancelled.status == raw["status"] == "cancelled"
    assert 0 < response_usage(cancelled).output_tokens < 2000
    # The worker stopped generating (nothing else streams on this stack now).
    deadline = time.monotonic() + 5
    while running_on_workers(stack) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert running_on_workers(stack) == 0
    # The stored response says so too, and the ledger holds exactly what was generated.
    assert c.responses.retrieve(created.id).status == "cancelled"
    after = billed_after(stack, "alice", before, 1)
    assert after["responses"] - before["responses"] == 1
    assert (
        after["output_tokens"] - before["output_tokens"] == response_usage(cancelled).output_tokens
    )
    assert after["input_tokens"] - before["input_tokens"] == response_usage(cancelled).input_tokens
    assert polled.status == "in_progress"
    # Cancelling again answers with the cancelled response.
    assert c.responses.cancel(created.id).status == "cancelled"


def test_only_a_background_response_in_flight_can_be_cancelled(stack):
    c = client(stack)
    finished = poll(
        c, c.responses.create(model="turnpike-sim-4000", input="hi", background=True).id
    )
    assert finished.status == "completed"
    with pytest.raises(openai.BadRequestError) as err:
        c.responses.cancel(finished.id)
    assert err.value.param == "response_id"
    assert "Cannot cancel a completed response" in err.value.message
    synchronous = c.responses.create(model="turnpike-sim-4000", input="hi")
    with pytest.raises(openai.BadRequestError) as err:
        c.responses.cancel(synchronous.id)
    assert err.value.param == "response_id"
    with pytest.raises(openai.NotFoundError):
        c.responses.cancel("resp_does_not_exist")


def test_another_tenant_cannot_see_cancel_or_resume_a_background_response(stack):
    alice, bob = client(stack, "alice"), client(stack, "bob")
    created = alice.responses.create(
        model="turnpike-sim-65", input="Write 300 tokens", background=True, stream=False
    )
    with pytest.raises(openai.NotFoundError):
        bob.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        bob.responses.cancel(created.id)
    with pytest.raises(openai.NotFoundError):
        for _ in bob.responses.retrieve(created.id, stream=True, starting_after=0):
            pass
    assert alice.responses.cancel(created.id).status == "cancelled"


def test_a_streamed_background_response_resumes_after_a_disconnect(stack):
    c = client(stack)
    first = stream_then_drop(c, "turnpike-sim", 400, 6)
    response_id = first[0].response.id
    assert first[0].response.background is True
    last = first[-1].sequence_number
    rest = list(c.responses.retrieve(response_id, stream=True, starting_after=last))
    sequence = [e.sequence_number for e in first + rest]
    assert sequence == list(range(len(sequence)))
    assert rest[-1].type == "response.completed"
    text = "".join(e.delta for e in first + rest if e.type == "response.output_text.delta")
    assert text == text_of(rest[-1].response.output[0])
    # Replaying from the start gives the same events, each valid; past the end is refused.
    again = replay(stack, response_id)
    assert [e["sequence_number"] for e in again] == sequence
    for event in again:
        validate_stream_event(event)
    with pytest.raises(openai.BadRequestError) as err:
        for _ in c.responses.retrieve(response_id, stream=True, starting_after=sequence[-1] + 5):
            pass
    assert err.value.param == "starting_after"


def test_a_cancelled_stream_ends_with_the_cancelled_response(stack):
    c = client(stack)
    first = stream_then_drop(c, "turnpike-sim-65", 2000, 6)
    response_id = first[0].response.id
    assert c.responses.cancel(response_id).status == "cancelled"
    rest = list(c.responses.retrieve(response_id, stream=True, starting_after=5))
    sequence = [e.sequence_number for e in first + rest]
    assert sequence == list(range(len(sequence)))
    assert rest[-1].type == "response.incomplete"
    assert rest[-1].response.status == "cancelled"
    assert message(rest[-1].response.output[0]).status == "incomplete"
