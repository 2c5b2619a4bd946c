"""A create refused at the edge (turnpike.gateway.api.edge_shedding, in EdgeMiddleware): while
the process is full, POST /v1/responses gets its 503 before the body is read and before
routing, with the body, headers and counts a shed request always had; anything else, and
a create with room, passes through."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from turnpike.gateway import metrics
from turnpike.gateway.api.app import EdgeMiddleware
from turnpike.gateway.tenancy.admission import AdmissionControl
from turnpike.gateway.tenancy.limits import LocalLimiter
from turnpike.gateway.tenancy.shedding import InFlight
from turnpike.gateway.tenancy.tenants import TenantDirectory

KEYS = "sk-a:team-a,sk-b:team-b"


def gateway(bound: int) -> SimpleNamespace:
    keys = TenantDirectory.from_api_keys(KEYS)
    return SimpleNamespace(keys=keys, admission=AdmissionControl(LocalLimiter(), InFlight(bound)))


def scope(
    gw: SimpleNamespace, method: str = "POST", path: str = "/v1/responses", key: str = "sk-a"
):
    return {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(b"authorization", f"Bearer {key}".encode()), (b"content-length", b"20")],
        "app": SimpleNamespace(state=SimpleNamespace(gateway=gw)),
    }


class Inner:
    """The routed application: it reads the body, as the create endpoint does."""

    def __init__(self) -> None:
        self.called = False

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        self.called = True
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})


async def call(gw: SimpleNamespace, **kw: str) -> tuple[Inner, list[dict], list[str]]:
    inner, sent, reads = Inner(), [], []

    async def receive() -> dict:
        reads.append("body")
        return {"type": "http.request", "body": b'{"input": "hello"}', "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await EdgeMiddleware(inner, log_lines=False)(scope(gw, **kw), receive, send)
    return inner, sent, reads


def shed_count(reason: str) -> float:
    return metrics.SHED.labels(reason)._value.get()


async def test_a_full_process_refuses_a_create_before_reading_its_body() -> None:
    gw = gateway(bound=1)
    assert gw.admission.in_flight.try_admit("team-a") is None  # full
    before = shed_count("full")
    inner, sent, reads = await call(gw)
    assert not inner.called and reads == []  # neither routed nor read
    start, body = sent
    assert start["status"] == 503
    headers = dict(start["headers"])
    assert headers[b"retry-after"] == b"1" and b"x-request-id" in headers
    error = json.loads(body["body"])["error"]
    assert (error["code"], error["type"]) == ("server_overloaded", "server_error")
    assert shed_count("full") == before + 1
    assert gw.admission.in_flight.total == 1  # nothing taken


async def test_when_busy_the_tenant_over_its_share_is_refused_at_the_edge_and_others_pass() -> None:
    gw = gateway(bound=8)  # soft limit 6
    for _ in range(6):
        assert gw.admission.in_flight.try_admit("team-a") is None
    assert gw.admission.in_flight.try_admit("team-b") is None
    inner, sent, _ = await call(gw, key="sk-a")
    assert not inner.called and sent[0]["status"] == 503
    inner, sent, _ = await call(gw, key="sk-b")
    assert inner.called and sent[0]["status"] == 200


@pytest.mark.parametrize(
    ("method", "path", "key"),
    [
        ("POST", "/v1/responses/input_tokens", "sk-a"),
        ("GET", "/v1/responses", "sk-a"),
        ("POST", "/v1/conversations", "sk-a"),
        ("POST", "/v1/responses", "sk-unknown"),  # the route answers its 401
    ],
)
async def test_only_a_known_tenants_create_is_refused_at_the_edge(
    method: str, path: str, key: str
) -> None:
    gw = gateway(bound=1)
    assert gw.admission.in_flight.try_admit("team-a") is None
    inner, sent, _ = await call(gw, method=method, path=path, key=key)
    assert inner.called and sent[0]["status"] == 200


async def test_with_room_or_shedding_off_a_create_passes_through() -> None:
    for bound in (4, 0):
        inner, sent, reads = await call(gateway(bound))
        assert inner.called and reads == ["body"] and sent[0]["status"] == 200
