"""Tenants' limits across gateway processes that share a real Redis, and a gateway that
goes on serving when that Redis stops."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest
from support.gateway_process import start_gateway, stop
from support.tenants_file import write_tenants

pytestmark = pytest.mark.stack


def create(base: str, key: str) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/responses",
        # store: false, so what is tested is the limiter alone (the response store is
        # Redis's too, and a stopped Redis takes stored responses with it).
        json={"model": "turnpike-sim-4000", "input": "hi", "max_output_tokens": 16, "store": False},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


@pytest.fixture
def two_gateways(stack, redis_url, tmp_path):
    path = tmp_path / "tenants.yaml"
    # A tenant of its own: the limits live in the session's Redis.
    tenant = f"shared-{uuid.uuid4().hex[:8]}"
    keys = write_tenants(path, **{tenant: {"requests_per_minute": 10}})
    env = {
        "TURNPIKE_TENANTS_FILE": str(path),
        "TURNPIKE_API_KEYS": "",
        "TURNPIKE_REDIS_URL": redis_url,
    }
    started = [start_gateway(stack, **env) for _ in range(2)]
    yield [base for _, base in started], keys[tenant]
    for proc, _ in started:
        stop(proc)


def test_a_limit_holds_across_two_gateway_processes(two_gateways):
    (first, second), key = two_gateways
    statuses = [create(base, key).status_code for _ in range(10) for base in (first, second)]
    admitted = statuses.count(200)
    # One bucket of 10 for both (a second of refill may add one), not 10 each.
    assert 10 <= admitted <= 11, statuses
    assert set(statuses) == {200, 429}


def test_serving_goes_on_when_redis_stops(two_gateways, redis_container):
    (first, _), key = two_gateways
    assert create(first, key).status_code == 200
    redis_container.stop(timeout=5)
    began = time.monotonic()
    replies = [create(first, key) for _ in range(5)]
    # Limits per process now: still answered, quickly, none a server error.
    assert {r.status_code for r in replies} <= {200, 429}
    assert 200 in {r.status_code for r in replies}
    assert time.monotonic() - began < 10
