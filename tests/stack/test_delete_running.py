"""Deleting a response that is still running (issue 19): it stops (the worker stops,
what was generated is billed once) and it stays deleted, whatever the order in which
delete, cancel and completion reach the gateway."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from openai import OpenAI
from support.background import start_long_response

pytestmark = pytest.mark.stack

TENANT = "bob"


def client(stack) -> OpenAI:
    return OpenAI(base_url=stack.base_url, api_key=stack.api_keys[TENANT], max_retries=0)


def auth(stack) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.api_keys[TENANT]}"}


def usage(stack) -> dict:
    return httpx.get(f"{stack.base_url}/usage", headers=auth(stack), timeout=10).json()


def billed_after(stack, before: dict, responses: int) -> dict:
    """The totals once ``responses`` more are billed and nothing waits for billing; a
    few seconds more to show that nothing is billed twice."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        after = usage(stack)
        if after["responses"] - before["responses"] >= responses and not after["pending_events"]:
            break
        time.sleep(0.1)
    time.sleep(1.0)
    return usage(stack)


def delete(stack, response_id: str) -> httpx.Response:
    return httpx.delete(
        f"{stack.base_url}/responses/{response_id}", headers=auth(stack), timeout=30
    )


def get(stack, response_id: str) -> httpx.Response:
    return httpx.get(f"{stack.base_url}/responses/{response_id}", headers=auth(stack), timeout=30)


def cancel(stack, response_id: str) -> httpx.Response:
    url = f"{stack.base_url}/responses/{response_id}/cancel"
    return httpx.post(url, headers=auth(stack), timeout=30)


def stays_deleted(stack, response_id: str) -> None:
    assert get(stack, response_id).status_code == 404
    assert cancel(stack, response_id).status_code == 404
    assert delete(stack, response_id).status_code == 404


def test_deleting_a_streaming_response_stops_it_and_it_stays_deleted(stack) -> None:
    before = usage(stack)
    body = {"model": "turnpike-sim-65", "input": "Write 2000 tokens", "stream": True}
    events: list[dict] = []
    with httpx.stream(
        "POST", f"{stack.base_url}/responses", json=body, headers=auth(stack), timeout=60
    ) as stream:
        deleted = None
        for line in stream.iter_lines():
            if not line.startswith("data: {"):
                continue
            events.append(json.loads(line[len("data: ") :]))
            if events[-1]["type"] == "response.output_text.delta" and deleted is None:
                deleted = delete(stack, events[0]["response"]["id"])
    response_id = events[0]["response"]["id"]
    assert deleted is not None and deleted.status_code == 200, deleted
    assert deleted.json() == {"id": response_id, "object": "response", "deleted": True}
    # The stream ends at once, as a cancelled response, with what was generated.
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.incomplete" and final["status"] == "cancelled"
    assert 0 < final["usage"]["output_tokens"] < 2000
    stays_deleted(stack, response_id)
    after = billed_after(stack, before, 1)
    assert after["responses"] - before["responses"] == 1
    assert after["output_tokens"] - before["output_tokens"] == final["usage"]["output_tokens"]


def test_deleting_a_background_response_stops_it_and_it_stays_deleted(stack) -> None:
    before = usage(stack)
    created, _ = start_long_response(client(stack))
    reply = delete(stack, created.id)
    assert reply.status_code == 200 and reply.json()["deleted"] is True
    stays_deleted(stack, created.id)
    after = billed_after(stack, before, 1)
    assert after["responses"] - before["responses"] == 1
    assert 0 < after["output_tokens"] - before["output_tokens"] < 2000  # it stopped
    time.sleep(0.5)
    stays_deleted(stack, created.id)


def test_cancel_then_delete(stack) -> None:
    before = usage(stack)
    created, _ = start_long_response(client(stack))
    cancelled = cancel(stack, created.id)
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert delete(stack, created.id).status_code == 200
    stays_deleted(stack, created.id)
    after = billed_after(stack, before, 1)
    assert after["responses"] - before["responses"] == 1
    assert (
        after["output_tokens"] - before["output_tokens"]
        == (cancelled.json()["usage"]["output_tokens"])
    )


def test_delete_then_cancel(stack) -> None:
    before = usage(stack)
    created, _ = start_long_response(client(stack))
    assert delete(stack, created.id).status_code == 200
    assert cancel(stack, created.id).status_code == 404
    stays_deleted(stack, created.id)
    assert billed_after(stack, before, 1)["responses"] - before["responses"] == 1


def test_completion_then_delete(stack) -> None:
    before = usage(stack)
    c = client(stack)
    done = c.responses.create(model="turnpike-sim-4000", input="hi")
    assert done.status == "completed"
    assert delete(stack, done.id).status_code == 200
    stays_deleted(stack, done.id)
    assert billed_after(stack, before, 1)["responses"] - before["responses"] == 1


def test_delete_and_cancel_at_once(stack) -> None:
    before = usage(stack)
    ids = [start_long_response(client(stack))[0].id for _ in range(3)]
    answers: dict[str, list[int]] = {rid: [] for rid in ids}

    def hit(action, rid: str) -> None:
        answers[rid].append(action(stack, rid).status_code)

    threads = [
        threading.Thread(target=hit, args=(action, rid))
        for rid in ids
        for action in (delete, cancel)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for rid in ids:
        assert 200 in answers[rid] and set(answers[rid]) <= {200, 404}, answers
        stays_deleted(stack, rid)
    assert billed_after(stack, before, 3)["responses"] - before["responses"] == 3


def test_delete_racing_completion(stack) -> None:
    """Short background responses deleted as they finish: some before the end, some
    after; every one ends deleted and billed once."""
    before = usage(stack)
    c = client(stack)
    ids = []
    for i in range(10):
        created = c.responses.create(
            model="turnpike-sim-4000", input=f"hi {i}", background=True, max_output_tokens=40
        )
        time.sleep(0.002 * i)
        assert delete(stack, created.id).status_code == 200
        ids.append(created.id)
    for rid in ids:
        stays_deleted(stack, rid)
    after = billed_after(stack, before, len(ids))
    assert after["responses"] - before["responses"] == len(ids)
    time.sleep(0.5)
    for rid in ids:
        assert get(stack, rid).status_code == 404
