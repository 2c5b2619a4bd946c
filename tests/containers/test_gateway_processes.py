"""The gateway past one process: several processes (or replicas) share one response
store in a real Redis, so an HTTP follow-up that lands on any of them finds its parent.
(Without a shared store more than one process is refused: tests/stack/test_config_errors.py.)"""

from __future__ import annotations

import json
import os
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.gateway_process import start_gateway, stop
from support.procs import free_port
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.stack

HEADERS = {"Authorization": "Bearer sk-turnpike-dev"}


def create(base: str, **body) -> dict:
    reply = httpx.post(
        f"{base}/v1/responses",
        json={"model": "turnpike-sim", "input": "hello", **body},
        headers=HEADERS,
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


@pytest.fixture
def replicas(stack, redis_url):
    """Two gateway processes on their own ports, sharing one Redis."""
    started = [start_gateway(stack, TURNPIKE_REDIS_URL=redis_url) for _ in range(2)]
    yield [base for _, base in started]
    for proc, _ in started:
        stop(proc)


def test_a_follow_up_finds_its_parent_on_any_replica(replicas):
    a, b = replicas
    first = create(a, input="Remember the word 'teal'.")
    second = create(b, input="Which word?", previous_response_id=first["id"])
    third = create(a, input="And again?", previous_response_id=second["id"])
    assert third["status"] == "completed"
    items = httpx.get(
        f"{b}/v1/responses/{third['id']}/input_items", params={"order": "asc"}, headers=HEADERS
    ).json()["data"]
    texts = [
        part["text"] for item in items if item["type"] == "message" for part in item["content"]
    ]
    assert texts[0] == "Remember the word 'teal'." and texts[-1] == "And again?"
    # A WebSocket on the other replica continues from the store (its cache is empty).
    url = b.replace("http://", "ws://") + "/v1/responses"
    with ws_connect(url, additional_headers=HEADERS) as sock:
        sock.send(
            json.dumps(
                {
                    "type": "response.create",
                    "input": "Once more",
                    "previous_response_id": third["id"],
                }
            )
        )
        while (event := json.loads(sock.recv(timeout=30)))["type"] not in (
            "response.completed",
            "response.failed",
            "error",
        ):
            pass
    assert event["type"] == "response.completed", event


def serving_processes(pid: int) -> list[int]:
    """The processes uvicorn's supervisor ``pid`` spawned to serve (not its helpers,
    such as multiprocessing's resource tracker)."""
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        children = [int(p) for p in f.read().split()]
    spawned = []
    for child in children:
        with open(f"/proc/{child}/cmdline", "rb") as f:
            if b"spawn_main" in f.read():
                spawned.append(child)
    return spawned


def sockets(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return count


def test_one_port_served_by_two_processes(stack, redis_url):
    metrics_port = free_port()
    proc, base = start_gateway(
        stack,
        TURNPIKE_REDIS_URL=redis_url,
        TURNPIKE_GATEWAY_PROCESSES="2",
        TURNPIKE_GATEWAY_METRICS_PORT=str(metrics_port),
    )
    try:
        deadline = time.monotonic() + 30
        while len(workers := serving_processes(proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(workers) == 2, workers
        # Sixteen clients at once, each kept open: the kernel hands each connection to
        # whichever process accepts first, so both take some (each then holds a socket).
        before = {pid: sockets(pid) for pid in workers}
        clients = [httpx.Client(headers=HEADERS, timeout=30) for _ in range(16)]
        try:
            previous = None
            for turn, http in enumerate(clients):  # one conversation across all of them
                body = {"input": f"turn {turn}", "previous_response_id": previous}
                reply = http.post(f"{base}/v1/responses", json={"model": "turnpike-sim", **body})
                assert reply.status_code == 200, reply.text
                previous = reply.json()["id"]
            after = {pid: sockets(pid) for pid in workers}
        finally:
            for http in clients:
                http.close()
        assert all(after[pid] > before[pid] for pid in workers), (before, after)
        # One /metrics for the gateway, summing what every process recorded.
        page = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
        families = {f.name: f for f in text_string_to_metric_families(page)}
        completed = [
            s.value
            for s in families["turnpike_gateway_responses"].samples
            if s.labels["outcome"] == "completed"
        ]
        assert sum(completed) == 16
        assert [s.value for s in families["turnpike_gateway_active_responses"].samples] == [0]
    finally:
        stop(proc)
    assert proc.returncode == 0 and not any(os.path.exists(f"/proc/{pid}") for pid in workers)
