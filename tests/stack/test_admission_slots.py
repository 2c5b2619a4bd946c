"""Admission slots are given back on every exit (issue 19): a refused create, a client
that leaves, a cancelled or deleted response. A leaked slot is a denial of service to
every tenant of the process, so each kind of refusal is sent many times, against a
gateway of its own with a small in-flight bound, and another tenant must still be served.

The invariant behind it: the slots a gateway holds (``turnpike_gateway_admission_slots``)
equal the responses it has active (``turnpike_gateway_active_responses``), and both come
back to zero once a mixed run is over.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.gateway_process import start_gateway, stop
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.stack

BOUND = 8  # responses in flight: a leak of 8 slots is a full process
REPEATS = 200
ALICE, BOB = "sk-slots-alice", "sk-slots-bob"


def user(content) -> dict:
    return {"type": "message", "role": "user", "content": content}


SEALED = base64.b64encode(b"\x01" * 64).decode()
# Each kind of create that is refused after admission (the slot is taken first).
REFUSED: dict[str, dict[str, Any]] = {
    "compaction-not-sealed-here": {
        "input": [{"type": "compaction", "encrypted_content": SEALED}, user("hi")]
    },
    "reasoning-not-sealed-here": {
        "input": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": SEALED},
            user("hi"),
        ]
    },
    "unknown-previous-response": {"input": "hi", "previous_response_id": "resp_nope"},
    "unknown-conversation": {"input": "hi", "conversation": "conv_nope"},
    "corrupt-image": {
        "input": [user([{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}])]
    },
    "orphan-tool-output": {
        "input": [{"type": "function_call_output", "call_id": "call_nope", "output": "x"}]
    },
}


@pytest.fixture(scope="module")
def gateway(stack, tmp_path_factory):
    metrics_port = _free_port()
    proc, base = start_gateway(
        stack,
        log=tmp_path_factory.mktemp("slots") / "gateway.log",
        TURNPIKE_API_KEYS=f"{ALICE}:alice,{BOB}:bob",
        TURNPIKE_MAX_IN_FLIGHT=str(BOUND),
        TURNPIKE_GATEWAY_METRICS_PORT=str(metrics_port),
    )
    yield base, f"http://127.0.0.1:{metrics_port}/metrics"
    stop(proc)


def _free_port() -> int:
    from support.procs import free_port

    return free_port()


def create(base: str, key: str, body: dict, timeout: float = 60) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/responses",
        json={"model": "turnpike-sim", **body},
        headers={"Authorization": f"Bearer {key}"},
        timeout=timeout,
    )


def gauge(metrics_url: str, name: str) -> float:
    text = httpx.get(metrics_url, timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        if family.name == name
        for sample in family.samples
    )


def wait_idle(metrics_url: str, within_s: float = 30) -> tuple[float, float]:
    """(slots held, responses active) once both are zero, or as they stand at the deadline."""
    deadline = time.monotonic() + within_s
    while True:
        slots = gauge(metrics_url, "turnpike_gateway_admission_slots")
        active = gauge(metrics_url, "turnpike_gateway_active_responses")
        if (slots, active) == (0, 0) or time.monotonic() > deadline:
            return slots, active
        time.sleep(0.1)


@pytest.mark.parametrize("kind", sorted(REFUSED))
def test_a_refused_create_gives_its_slot_back(gateway, kind) -> None:
    base, metrics_url = gateway
    with httpx.Client(headers={"Authorization": f"Bearer {BOB}"}, timeout=60) as client:
        for _ in range(REPEATS):
            reply = client.post(
                f"{base}/v1/responses", json={"model": "turnpike-sim", **REFUSED[kind]}
            )
            assert 400 <= reply.status_code < 500, reply.text[:300]
    served = create(base, ALICE, {"input": "still served?"})
    assert served.status_code == 200, served.text[:300]
    assert wait_idle(metrics_url) == (0, 0)


def test_a_refused_websocket_create_gives_its_slot_back(gateway) -> None:
    base, metrics_url = gateway
    url = base.replace("http://", "ws://") + "/v1/responses"
    with ws_connect(url, additional_headers={"Authorization": f"Bearer {BOB}"}) as sock:
        for _ in range(REPEATS // 4):
            for body in REFUSED.values():
                sock.send(json.dumps({"type": "response.create", "model": "turnpike-sim", **body}))
                event = json.loads(sock.recv(timeout=60))
                assert event["type"] == "error" and 400 <= event["status"] < 500, event
    assert create(base, ALICE, {"input": "still served?"}).status_code == 200
    assert wait_idle(metrics_url) == (0, 0)


def test_readyz_says_not_ready_while_no_response_can_be_admitted(gateway) -> None:
    """BOUND long streams fill the process: /readyz answers 503 until one ends."""
    base, metrics_url = gateway
    body = {"input": "write a story in 2000 words", "stream": True, "max_output_tokens": 4000}
    model = {"model": "turnpike-sim-65"}  # 65 tokens/s: each stream lasts half a minute
    streams: list[httpx.Response] = []
    readers: list[Iterator[str]] = []  # kept: a reader collected closes its stream
    client = httpx.Client(headers={"Authorization": f"Bearer {ALICE}"}, timeout=60)
    try:
        for _ in range(BOUND):
            request = client.build_request("POST", f"{base}/v1/responses", json={**body, **model})
            stream = client.send(request, stream=True)
            assert stream.status_code == 200
            streams.append(stream)
            readers.append(stream.iter_lines())
            # The headers leave before the turn begins; its first event means it is counted.
            assert "response.created" in next(readers[-1])
        ready = httpx.get(f"{base}/readyz", timeout=10)
        assert ready.status_code == 503, ready.text
        admission = ready.json()["admission"]
        assert (admission["in_flight"], admission["bound"]) == (BOUND, BOUND), admission
        assert gauge(metrics_url, "turnpike_gateway_admission_slots") == BOUND
        assert gauge(metrics_url, "turnpike_gateway_active_responses") == BOUND
    finally:
        for stream in streams:
            stream.close()  # the client leaves: each response is cancelled, its slot freed
        client.close()
    assert wait_idle(metrics_url) == (0, 0)
    assert httpx.get(f"{base}/readyz", timeout=10).status_code == 200


def test_slots_held_equal_responses_active_after_a_mixed_run(gateway) -> None:
    """Completions, refusals, streams dropped mid-way, background responses cancelled
    and deleted, WebSocket turns and sockets closed mid-turn, all at once."""
    base, metrics_url = gateway
    auth = {"Authorization": f"Bearer {ALICE}"}
    errors: list[str] = []

    def completions() -> None:
        for i in range(10):
            reply = create(base, ALICE, {"input": f"hello {i}"})
            if reply.status_code not in (200, 503):
                errors.append(reply.text[:200])

    def refusals() -> None:
        for body in list(REFUSED.values()) * 3:
            reply = create(base, BOB, body)
            if not 400 <= reply.status_code < 500:
                errors.append(reply.text[:200])

    def dropped_streams() -> None:
        for _ in range(5):
            with httpx.stream(
                "POST",
                f"{base}/v1/responses",
                json={"model": "turnpike-sim-65", "input": "long story", "stream": True},
                headers=auth,
                timeout=60,
            ) as stream:
                for _line in stream.iter_lines():
                    break  # leave after the first event

    def background() -> None:
        for i in range(6):
            reply = create(
                base, ALICE, {"model": "turnpike-sim-65", "input": "story", "background": True}
            )
            if reply.status_code != 200:
                continue
            rid = reply.json()["id"]
            action = ("cancel", "delete")[i % 2]
            if action == "cancel":
                httpx.post(f"{base}/v1/responses/{rid}/cancel", headers=auth, timeout=60)
            else:
                httpx.delete(f"{base}/v1/responses/{rid}", headers=auth, timeout=60)

    def sockets() -> None:
        url = base.replace("http://", "ws://") + "/v1/responses"
        for _ in range(4):
            with ws_connect(url, additional_headers=auth) as sock:
                sock.send(
                    json.dumps(
                        {"type": "response.create", "model": "turnpike-sim-65", "input": "story"}
                    )
                )
                sock.recv(timeout=60)  # leave mid-turn

    threads = [
        threading.Thread(target=work)
        for work in (completions, refusals, dropped_streams, background, sockets)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors
    assert wait_idle(metrics_url) == (0, 0)
    assert create(base, BOB, {"input": "still served?"}).status_code == 200
