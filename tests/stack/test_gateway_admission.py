"""Admission control through a real gateway process: a tenant over its limits gets the
API's 429 with the rate-limit headers (and the official SDK's retry then succeeds), a
spent budget gets insufficient_quota, a WebSocket request over a limit gets an error
event on a socket that stays usable, a connection over the cap is refused at the
upgrade, and past the in-flight bound the gateway sheds with a fast 503."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from openai import OpenAI, RateLimitError
from support.gateway_process import start_gateway, stop
from support.tenants_file import write_tenants
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.stack

MODEL = "turnpike-sim-4000"


@pytest.fixture(scope="module")
def gateway(stack, tmp_path_factory):
    """One gateway process over the shared stack's backends, with a tenants file."""
    path = tmp_path_factory.mktemp("tenants") / "tenants.yaml"
    keys = write_tenants(
        path,
        limited={"requests_per_minute": 30},
        budgeted={"token_budget": {"tokens": 50, "period": "day"}},
        one_at_a_time={"max_concurrent_responses": 1, "max_websocket_connections": 1},
        sim_only={"models": ["turnpike-sim"]},
        free={},
    )
    proc, base = start_gateway(stack, TURNPIKE_TENANTS_FILE=str(path), TURNPIKE_API_KEYS="")
    yield base, keys
    stop(proc)


def post(base: str, key: str, **body) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/responses",
        json={"model": MODEL, "input": "hello", **body},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def test_over_its_requests_per_minute_a_tenant_gets_429_and_the_sdk_retry_succeeds(gateway):
    base, keys = gateway
    ok = post(base, keys["limited"])
    assert ok.status_code == 200
    assert ok.headers["x-ratelimit-limit-requests"] == "30"
    assert int(ok.headers["x-ratelimit-remaining-requests"]) <= 29
    refused = None
    for _ in range(40):  # a bucket of 30, refilled one every 2 s
        reply = post(base, keys["limited"], max_output_tokens=16)
        if reply.status_code == 429:
            refused = reply
            break
        assert reply.status_code == 200, reply.text
    assert refused is not None, "30 requests a minute were never refused"
    error = refused.json()["error"]
    assert error["code"] == "rate_limit_exceeded" and error["type"] == "requests"
    assert refused.headers["x-ratelimit-remaining-requests"] == "0"
    assert refused.headers["x-ratelimit-reset-requests"]
    assert 1 <= int(refused.headers["retry-after"]) <= 3
    # The official SDK honours retry-after and gets through.
    client = OpenAI(base_url=f"{base}/v1", api_key=keys["limited"], max_retries=3)
    assert client.responses.create(model=MODEL, input="again").status == "completed"
    # Without retries the SDK raises the API's error, not a transport failure.
    impatient = OpenAI(base_url=f"{base}/v1", api_key=keys["limited"], max_retries=0)
    with pytest.raises(RateLimitError):
        for _ in range(40):
            impatient.responses.create(model=MODEL, input="x", max_output_tokens=16)


def test_a_spent_budget_gets_insufficient_quota(gateway):
    base, keys = gateway
    first = post(base, keys["budgeted"])  # admitted: nothing used yet
    assert first.status_code == 200
    second = post(base, keys["budgeted"])
    assert second.status_code == 429
    error = second.json()["error"]
    assert error["code"] == "insufficient_quota" and error["type"] == "insufficient_quota"
    assert int(second.headers["retry-after"]) > 0  # until the day ends


def test_a_model_outside_the_tenants_list_is_refused_as_unknown(gateway):
    base, keys = gateway
    assert post(base, keys["sim_only"], model="turnpike-sim").status_code == 200
    refused = post(base, keys["sim_only"], model=MODEL)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "model_not_found"
    assert refused.json()["error"]["param"] == "model"


def terminal_or_error(sock) -> dict:
    while True:
        event = json.loads(sock.recv(timeout=30))
        if event["type"] in ("response.completed", "response.failed", "error"):
            return event


def test_a_websocket_request_over_a_limit_gets_an_error_event_and_the_socket_stays_usable(
    gateway,
):
    base, keys = gateway
    url = base.replace("http://", "ws://") + "/v1/responses"
    headers = {"Authorization": f"Bearer {keys['one_at_a_time']}"}
    with ws_connect(url, additional_headers=headers) as sock:
        long = {"type": "response.create", "model": "turnpike-sim", "max_output_tokens": 400}
        sock.send(json.dumps({**long, "input": "Tell me a long story.", "stream_id": "a"}))
        sock.send(json.dumps({**long, "input": "And another.", "stream_id": "b"}))
        events = [terminal_or_error(sock), terminal_or_error(sock)]
        errors = [e for e in events if e["type"] == "error"]
        assert len(errors) == 1, events
        assert errors[0]["status"] == 429 and errors[0]["stream_id"] == "b"
        assert errors[0]["error"]["code"] == "rate_limit_exceeded"
        # Once the first is done, the same socket serves the next request.
        sock.send(json.dumps({**long, "input": "Now?", "stream_id": "b"}))
        assert terminal_or_error(sock)["type"] == "response.completed"
        # A second connection is over the tenant's cap: refused at the upgrade.
        with pytest.raises(InvalidStatus) as refused:
            ws_connect(url, additional_headers=headers, open_timeout=10)
        assert refused.value.response.status_code == 429
        body = json.loads(refused.value.response.body)
        assert body["error"]["code"] == "rate_limit_exceeded"
    # Closed: the slot is free again.
    with ws_connect(url, additional_headers=headers, open_timeout=10):
        pass


def test_past_the_in_flight_bound_the_gateway_sheds_fast_and_finishes_what_it_admitted(stack):
    proc, base = start_gateway(stack, TURNPIKE_MAX_IN_FLIGHT="2")
    try:

        async def one(http: httpx.AsyncClient) -> tuple[httpx.Response, float]:
            began = time.monotonic()
            reply = await http.post(
                f"{base}/v1/responses",
                json={
                    "model": "turnpike-sim",
                    "input": "A long story, please.",
                    "max_output_tokens": 300,
                },
                headers={"Authorization": "Bearer sk-turnpike-dev"},
            )
            return reply, time.monotonic() - began

        async def burst() -> list[tuple[httpx.Response, float]]:
            async with httpx.AsyncClient(timeout=60) as http:
                return await asyncio.gather(*(one(http) for _ in range(8)))

        replies = asyncio.run(burst())
    finally:
        stop(proc)
    admitted = [r for r, _ in replies if r.status_code == 200]
    shed = [(r, s) for r, s in replies if r.status_code == 503]
    assert len(admitted) + len(shed) == 8
    assert admitted and shed
    assert all(r.json()["status"] == "completed" for r in admitted)
    for reply, seconds in shed:
        assert reply.json()["error"]["code"] == "server_overloaded"
        assert reply.headers["retry-after"] == "1"
        assert seconds < 1.0
