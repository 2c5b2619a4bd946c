"""Bugs that users of peer servers reported, each shown absent from Turnpike against a
stack of real processes:

- LiteLLM: one API key could continue another key's response over WebSocket. Here the
  other tenant's ``previous_response_id`` is not found, over WebSocket as over HTTP, and
  the socket stays usable (HTTP and the other paths: tests/stack/test_api_errors.py,
  tests/stack/test_tenant_isolation.py).
- Bifrost: an error in the middle of a stream arrived as an envelope of its own instead of
  a final ``response.failed``. Here a model lost mid-stream ends the stream with
  ``response.failed`` (the spec's event, the failed response inside), over SSE and over
  WebSocket alike, and the failed response is stored as such.
- vLLM: the response store grew without bound and did not work across nodes. Here the
  store is bounded (tests/unit/gateway/test_gateway_caches.py; `make soak` shows memory flat under
  load) and, with Redis, shared by every gateway process and replica
  (tests/containers/test_gateway_processes.py, test_background_replicas.py).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from support.openresponses import validate_response_object, validate_ws_event
from support.raw_calls import until_terminal
from support.wire import TERMINAL
from websockets.sync.client import connect as ws_connect

from turnpike.devstack import LocalStack, StackConfig

LONG_ANSWER = "Describe the weather of every city you know, in 1000 words."
SLOW_MODEL = "turnpike-sim-65"  # 65 tokens/s: a stream that lasts long enough to cut
FAILURE_WITHIN_S = 30.0


@pytest.fixture(scope="module")
def own_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A stack of its own: this module kills its workers."""
    env = {"TURNPIKE_API_KEYS": "sk-peer-alice:alice,sk-peer-bob:bob"}
    local = LocalStack(StackConfig.private(tmp_path_factory.mktemp("peers"), extra_env=env))
    local.start()
    try:
        yield local
    finally:
        local.stop()


def ws(local: LocalStack, key: str):
    return ws_connect(
        local.endpoints.ws_url,
        additional_headers={"Authorization": f"Bearer {key}"},
        max_size=None,
        open_timeout=10,
    )


def test_another_keys_response_cannot_be_continued_over_websocket(own_stack: LocalStack) -> None:
    with ws(own_stack, "sk-peer-alice") as alice:
        alice.send(json.dumps({"type": "response.create", "input": "A secret plan."}))
        first = until_terminal(alice, 60)[-1]
        assert first["type"] == "response.completed"
        rid = first["response"]["id"]
    with ws(own_stack, "sk-peer-bob") as bob:
        bob.send(
            json.dumps({"type": "response.create", "input": "Go on.", "previous_response_id": rid})
        )
        refused = until_terminal(bob, 60)[-1]
        assert refused["type"] == "error"
        assert refused["error"]["code"] == "previous_response_not_found"
        assert refused["error"]["param"] == "previous_response_id"
        assert "secret" not in json.dumps(refused).lower()
        # The socket is still Bob's to use.
        bob.send(json.dumps({"type": "response.create", "input": "Hello."}))
        assert until_terminal(bob, 60)[-1]["type"] == "response.completed"
    # Alice continues her own, on a new connection (the chained path, from the store).
    with ws(own_stack, "sk-peer-alice") as alice:
        alice.send(
            json.dumps({"type": "response.create", "input": "Go on.", "previous_response_id": rid})
        )
        assert until_terminal(alice, 60)[-1]["type"] == "response.completed"


def _sse_events(reply: httpx.Response) -> Iterator[dict]:
    for line in reply.iter_lines():
        if line.startswith("data: "):
            yield json.loads(line[len("data: ") :])


def test_a_model_lost_mid_stream_ends_with_response_failed_on_both_transports(
    own_stack: LocalStack,
) -> None:
    """Runs last in this module: it kills the stack's workers."""
    endpoints = own_stack.endpoints
    body = {"model": SLOW_MODEL, "input": LONG_ANSWER, "stream": True}
    streaming = {"sse": threading.Event(), "websocket": threading.Event()}
    ends: dict[str, dict] = {}

    def over_sse() -> None:
        headers = {"Authorization": "Bearer sk-peer-alice"}
        with httpx.stream(
            "POST", f"{endpoints.base_url}/responses", json=body, headers=headers, timeout=90
        ) as reply:
            assert reply.status_code == 200
            for event in _sse_events(reply):
                if event["type"] == "response.output_text.delta":
                    streaming["sse"].set()
                if event["type"] in TERMINAL:
                    ends["sse"] = event
                    return

    def over_websocket() -> None:
        with ws(own_stack, "sk-peer-bob") as sock:
            sock.send(json.dumps({"type": "response.create", **body}))
            while True:
                event = json.loads(sock.recv(timeout=90))
                validate_ws_event(event)
                if event["type"] == "response.output_text.delta":
                    streaming["websocket"].set()
                if event["type"] in TERMINAL:
                    ends["websocket"] = event
                    return

    clients = [threading.Thread(target=f, daemon=True) for f in (over_sse, over_websocket)]
    for client in clients:
        client.start()
    for name, started in streaming.items():
        assert started.wait(60), f"no text delta over {name}"
    killed_at = time.monotonic()
    for name, pid in own_stack.pids.items():
        if name.startswith("worker"):
            os.kill(pid, signal.SIGKILL)
    for client in clients:
        client.join(FAILURE_WITHIN_S + 30)
    assert set(ends) == {"sse", "websocket"}, ends
    assert time.monotonic() - killed_at < FAILURE_WITHIN_S + 30
    for name, event in ends.items():
        # The spec's terminal event with the failed response in it: no envelope of our own.
        assert event["type"] == "response.failed", (name, event)
        response = event["response"]
        validate_response_object(response)
        assert response["status"] == "failed"
        assert response["error"]["code"] == "server_error"
    # Stored as failed, for its owner.
    rid = ends["sse"]["response"]["id"]
    stored = httpx.get(
        f"{endpoints.base_url}/responses/{rid}",
        headers={"Authorization": "Bearer sk-peer-alice"},
        timeout=10,
    )
    assert stored.status_code == 200 and stored.json()["status"] == "failed"
