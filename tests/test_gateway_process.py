"""A second gateway process in front of the running stack's backends, with
settings the session stack does not use: a short WebSocket lifetime, and
graceful shutdown with a response in flight."""

from __future__ import annotations

import json
import signal
import time

import httpx
import pytest
from support.procs import free_port, start_service
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.stack


@pytest.fixture
def gateway(stack):
    port = free_port()
    env = {
        "TURNPIKE_GATEWAY_PORT": str(port),
        "TURNPIKE_SAFETY_ADDR": stack.safety,
        "TURNPIKE_TOKENIZER_ADDR": stack.tokenizer,
        "TURNPIKE_ROUTER_ADDR": stack.router,
        "TURNPIKE_BILLING_ADDR": stack.billing,
        "TURNPIKE_IMAGERES_ADDR": stack.imageres,
        "TURNPIKE_API_KEYS": "sk-turnpike-dev:dev",
        "TURNPIKE_WS_MAX_LIFETIME_S": "2",
    }
    proc = start_service("gateway", env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, "gateway exited during startup"
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("gateway did not become ready")
    yield proc, base
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def test_websocket_closes_with_1001_after_its_lifetime(gateway):
    _, base = gateway
    url = base.replace("http://", "ws://") + "/v1/responses"
    with ws_connect(url, additional_headers={"Authorization": "Bearer sk-turnpike-dev"}) as sock:
        sock.send(json.dumps({"type": "response.create", "input": "hi"}))
        while json.loads(sock.recv(timeout=10))["type"] != "response.completed":
            pass
        started = time.monotonic()
        with pytest.raises(ConnectionClosed) as closed:
            sock.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
        assert "lifetime" in closed.value.rcvd.reason
        assert time.monotonic() - started < 5


def test_sigterm_lets_an_in_flight_response_finish(gateway):
    proc, base = gateway
    events = []
    with httpx.stream(
        "POST",
        f"{base}/v1/responses",
        json={"model": "turnpike-sim-65", "input": "tell me a story", "stream": True},
        headers={"Authorization": "Bearer sk-turnpike-dev"},
        timeout=30,
    ) as reply:
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                events.append(json.loads(line[6:])["type"])
                if len(events) == 3:
                    proc.send_signal(signal.SIGTERM)
    assert events[-1] == "response.completed"
    # uvicorn re-raises SIGTERM once its graceful shutdown is done.
    assert proc.wait(20) in (0, -signal.SIGTERM)
