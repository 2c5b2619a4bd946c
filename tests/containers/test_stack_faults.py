"""Faults in the container stack: a worker container stopped in the middle of a streamed
response, and the billing container stopped and restarted while requests run."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from openai import OpenAI
from support.wire import TERMINAL

# docker stop: SIGTERM, the worker drains for TURNPIKE_SHUTDOWN_GRACE_S (5 s in .env) and
# then cuts what is left; a long answer (about 1000 tokens at 65 tokens/s, 15 s) is still
# streaming by then.
LONG_ANSWER = "Describe the weather of every city you know, in 1000 words."
STOP_TIMEOUT_S = 10
FAILURE_WITHIN_S = 30


@pytest.fixture(scope="module")
def client(container_stack):
    with OpenAI(
        base_url=container_stack.base_url,
        api_key=container_stack.keys["faults"],
        max_retries=0,
        timeout=60,
    ) as sdk:
        yield sdk


def test_a_worker_stopped_mid_stream(container_stack, otlp, client):
    # A conversation served by a known worker (the trace says which), so the follow-up
    # goes there too (conversation affinity).
    first = client.responses.create(model="turnpike-sim-65", input="Hello there")
    victim = otlp.worker_of(first.id)
    other = {"worker-1": "worker-2", "worker-2": "worker-1"}[victim]
    container = container_stack.container(victim)

    stopper: threading.Thread | None = None
    stopped_at = 0.0
    events: list[str] = []
    terminal = None
    began = time.monotonic()
    stream = client.responses.create(
        model="turnpike-sim-65",
        previous_response_id=first.id,
        input=LONG_ANSWER,
        stream=True,
    )
    for event in stream:
        events.append(event.type)
        if event.type == "response.output_text.delta" and stopper is None:
            stopped_at = time.monotonic()
            stopper = threading.Thread(target=container.stop, kwargs={"timeout": STOP_TIMEOUT_S})
            stopper.start()
        if event.type in TERMINAL:
            terminal = event
            break
        assert time.monotonic() - began < 120, "the stream hangs"
    assert stopper is not None, f"no text delta before the end: {events}"
    stopper.join()
    # A clear failure event, soon after the stop; not a hang, not a silent end.
    assert terminal is not None and terminal.type == "response.failed", events[-5:]
    assert time.monotonic() - stopped_at < FAILURE_WITHIN_S
    error = terminal.response.error
    assert error is not None and error.code == "server_error"
    assert "worker" in error.message.lower()
    assert events.count("response.output_text.delta") >= 1

    # The gateway stays up, and the next request is served by the other worker.
    assert container_stack.gateway_alive()
    after = client.responses.create(model="turnpike-sim", input="Anyone there?")
    assert after.status == "completed"
    assert otlp.worker_of(after.id) == other

    # Back again, it serves: the first conversation returns to it.
    container.start()
    container_stack.wait_healthy(victim)
    deadline = time.monotonic() + 30
    while True:
        again = client.responses.create(
            model="turnpike-sim", previous_response_id=first.id, input="Still there?"
        )
        assert again.status == "completed"
        if otlp.worker_of(again.id) == victim:
            break
        # The router learns of the comeback within its health interval.
        assert time.monotonic() < deadline, f"{victim} never served again"
        time.sleep(0.5)


def usage_of(stack, tenant: str) -> dict:
    reply = httpx.get(
        f"{stack.base_url}/usage",
        headers={"Authorization": f"Bearer {stack.keys[tenant]}"},
        timeout=10,
    )
    reply.raise_for_status()
    return reply.json()


def test_billing_restarted_while_requests_run_loses_and_doubles_nothing(container_stack):
    stack = container_stack
    assert usage_of(stack, "billing")["responses"] == 0
    billing = stack.container("billing")
    completed: list[dict] = []
    failures: list[str] = []
    lock = threading.Lock()
    stop_load = threading.Event()

    def load(worker: int) -> None:
        with httpx.Client(
            base_url=stack.base_url,
            headers={"Authorization": f"Bearer {stack.keys['billing']}"},
            timeout=60,
        ) as http:
            n = 0
            while not stop_load.is_set() and n < 200:
                n += 1
                reply = http.post(
                    "/responses",
                    json={"model": "turnpike-sim-4000", "input": f"load {worker}.{n}"},
                )
                with lock:
                    if reply.status_code == 200 and reply.json()["status"] == "completed":
                        completed.append(reply.json())
                    else:
                        failures.append(f"{reply.status_code} {reply.text[:200]}")

    threads = [threading.Thread(target=load, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(2)
        billing.stop(timeout=10)  # SIGTERM: drains, then exits
        time.sleep(3)  # requests go on while billing is away
        billing.start()
        stack.wait_healthy("billing")
        time.sleep(2)
    finally:
        stop_load.set()
        for thread in threads:
            thread.join(timeout=120)
    assert not failures, failures[:5]
    assert len(completed) > 10

    expected = {
        "responses": len(completed),
        "input_tokens": sum(r["usage"]["input_tokens"] for r in completed),
        "output_tokens": sum(r["usage"]["output_tokens"] for r in completed),
    }
    assert len({r["id"] for r in completed}) == len(completed)
    deadline = time.monotonic() + 60
    while True:
        try:
            usage = usage_of(stack, "billing")
        except httpx.HTTPError:
            usage = None
        if usage and usage["pending_events"] == 0 and usage["responses"] >= len(completed):
            break
        assert time.monotonic() < deadline, f"usage never settled: {usage} vs {expected}"
        time.sleep(0.5)
    assert {key: usage[key] for key in expected} == expected
