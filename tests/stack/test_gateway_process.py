"""A second gateway process in front of the running stack's backends, with
settings the session stack does not use: a short WebSocket lifetime, and
graceful shutdown with a response in flight."""

from __future__ import annotations

import json
import signal
import time

import httpx
import pytest
from support.gateway_process import start_gateway, stop
from support.procs import free_port, start_service
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.stack


@pytest.fixture
def gateway(stack):
    proc, base = start_gateway(
        stack, TURNPIKE_WS_MAX_LIFETIME_S="2", TURNPIKE_WS_PER_MESSAGE_DEFLATE="true"
    )
    yield proc, base
    stop(proc)


def test_websocket_compression_when_configured(gateway):
    _, base = gateway
    url = base.replace("http://", "ws://") + "/v1/responses"
    headers = {"Authorization": "Bearer sk-turnpike-dev"}
    with ws_connect(url, additional_headers=headers, compression="deflate") as sock:
        assert [e.name for e in sock.protocol.extensions] == ["permessage-deflate"]
        sock.send(json.dumps({"type": "response.create", "input": "hi"}))
        while json.loads(sock.recv(timeout=10))["type"] != "response.completed":
            pass


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


def test_creates_still_queued_when_the_lifetime_ends_get_an_error_each(gateway):
    """A create waiting behind a running response on its lane when the lifetime ends is
    not started: it gets an error event on its lane; the running one finishes, then the
    socket closes with 1001."""
    _, base = gateway
    url = base.replace("http://", "ws://") + "/v1/responses"
    with ws_connect(url, additional_headers={"Authorization": "Bearer sk-turnpike-dev"}) as sock:
        # About 400 tokens at 65 tokens/s, paced: still running when the 2 s are over.
        long = {"model": "turnpike-sim-65", "input": "Tell me a story in 400 tokens"}
        sock.send(json.dumps({"type": "response.create", "stream_id": "a", **long}))
        sock.send(json.dumps({"type": "response.create", "stream_id": "a", "input": "next"}))
        events = []
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                events.append(json.loads(sock.recv(timeout=30)))
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001
    kinds = [e["type"] for e in events]
    assert kinds.count("response.created") == 1 and kinds[-1] == "response.completed"
    [error] = [e for e in events if e["type"] == "error"]
    assert error["stream_id"] == "a"
    assert error["error"]["code"] == "websocket_connection_limit_reached"


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


def test_sigterm_closes_each_socket_with_1012_only_between_responses(stack):
    """A deploy: the socket with a response in flight gets all of it, then close 1012
    (service restart: the SDK reconnects and sends what it had not); an idle socket is
    closed at once."""
    proc, base = start_gateway(stack)  # the default lifetime: only the drain closes
    url = base.replace("http://", "ws://") + "/v1/responses"
    auth = {"Authorization": "Bearer sk-turnpike-dev"}
    with (
        ws_connect(url, additional_headers=auth) as busy,
        ws_connect(url, additional_headers=auth) as idle,
    ):
        long = {"model": "turnpike-sim-65", "input": "Tell me a story in 150 tokens"}
        busy.send(json.dumps({"type": "response.create", **long}))
        assert json.loads(busy.recv(timeout=10))["type"] == "response.created"
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(ConnectionClosed) as idle_closed:
            idle.recv(timeout=5)
        events = []
        with pytest.raises(ConnectionClosed) as busy_closed:
            while True:
                events.append(json.loads(busy.recv(timeout=30))["type"])
    assert events[-1] == "response.completed"
    for closed in (idle_closed, busy_closed):
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
    try:
        assert proc.wait(20) in (0, -signal.SIGTERM)
    finally:
        stop(proc)


def test_sigterm_with_a_shutdown_delay_is_not_ready_but_serves_until_it_ends(stack):
    """A lame duck: for TURNPIKE_SHUTDOWN_DELAY_S after SIGTERM, /readyz answers 503 (a
    load balancer moves new requests away) while every request is still served, a
    WebSocket's included; only then does the port close. Without it, the requests a load
    balancer sends before its next check would meet a closed port."""
    proc, base = start_gateway(stack, TURNPIKE_SHUTDOWN_DELAY_S="3")
    auth = {"Authorization": "Bearer sk-turnpike-dev"}
    url = base.replace("http://", "ws://") + "/v1/responses"
    try:
        with ws_connect(url, additional_headers=auth) as sock:
            signalled = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            ready = httpx.get(f"{base}/readyz", timeout=5)
            assert ready.status_code == 503 and ready.json()["draining"] is True
            reply = httpx.post(
                f"{base}/v1/responses", json={"input": "still there?"}, headers=auth, timeout=10
            )
            assert reply.status_code == 200 and reply.json()["status"] == "completed"
            sock.send(json.dumps({"type": "response.create", "input": "and here?"}))
            while json.loads(sock.recv(timeout=10))["type"] != "response.completed":
                pass
            assert time.monotonic() - signalled < 3  # all of it inside the delay
            with pytest.raises(ConnectionClosed) as closed:
                sock.recv(timeout=15)  # the delay over, the drain closes the idle socket
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1012
        assert time.monotonic() - signalled >= 3
        assert proc.wait(20) in (0, -signal.SIGTERM)
    finally:
        stop(proc)


def test_a_billing_outage_delays_usage_records_but_loses_none(stack, tmp_path):
    """Billing is down while responses complete (on the blocking legacy path too); once it
    is back, every response is billed exactly once, and a restart changes nothing."""
    billing_port = free_port()
    proc, base = start_gateway(
        stack, ready_path="/healthz", TURNPIKE_BILLING_ADDR=f"127.0.0.1:{billing_port}"
    )
    billing = None
    headers = {"Authorization": "Bearer sk-turnpike-dev"}
    try:
        created = []
        for pipeline in ("sprint", "legacy", "sprint", "legacy"):
            reply = httpx.post(
                f"{base}/v1/responses",
                json={"model": "turnpike-sim-4000", "input": f"bill {pipeline}"},
                headers={**headers, "X-Turnpike-Pipeline": pipeline},
                timeout=30,
            )
            assert reply.status_code == 200, reply.text
            created.append(reply.json())
        billing_env = {
            "TURNPIKE_BILLING_PORT": str(billing_port),
            "TURNPIKE_BILLING_LEDGER": str(tmp_path / "ledger.sqlite3"),
        }
        billing = start_service("billing", billing_env)

        def totals():
            reply = httpx.get(f"{base}/v1/usage", headers=headers, timeout=5)
            return reply.json() if reply.status_code == 200 else None

        deadline = time.monotonic() + 30
        while (now := totals()) is None or now["pending_events"] or now["responses"] < 4:
            assert time.monotonic() < deadline, f"usage never arrived: {now}"
            time.sleep(0.2)
        assert now["responses"] == 4
        assert now["input_tokens"] == sum(r["usage"]["input_tokens"] for r in created)
        assert now["output_tokens"] == sum(r["usage"]["output_tokens"] for r in created)

        billing.send_signal(signal.SIGTERM)
        assert billing.wait(15) == 0
        billing = start_service("billing", billing_env)
        deadline = time.monotonic() + 30
        while (again := totals()) is None:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert again["responses"] == 4 and again["input_tokens"] == now["input_tokens"]
    finally:
        stop(proc)
        if billing is not None:
            stop(billing)
