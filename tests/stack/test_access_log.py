"""Refusals are visible (issue 19): every request is counted by route, transport, status
and error code, and has one access line (request id, tenant, route or event type,
status, code and param, duration), never a key nor content; the lines can be turned
off; the dashboard shows refusals. Against gateway processes of their own, with
captured logs."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.access_log import access_lines
from support.gateway_process import start_gateway, stop
from support.procs import free_port
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.stack

KEY = "sk-access-log-secret-key-1234"
SECRET_TEXT = "content-that-must-never-reach-a-log"


def start(stack, tmp_path, **env):
    log = tmp_path / "gateway.log"
    metrics_port = free_port()
    proc, base = start_gateway(
        stack,
        log=log,
        TURNPIKE_API_KEYS=f"{KEY}:team-a",
        TURNPIKE_GATEWAY_METRICS_PORT=str(metrics_port),
        **env,
    )
    return proc, base, log, f"http://127.0.0.1:{metrics_port}/metrics"


@pytest.fixture(scope="module")
def gateway(stack, tmp_path_factory):
    proc, base, log, metrics_url = start(stack, tmp_path_factory.mktemp("access"))
    yield base, log, metrics_url
    stop(proc)


def wait_for_line(log, **fields) -> dict:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for line in access_lines(log):
            if all(line.get(k) == v for k, v in fields.items()):
                return line
        time.sleep(0.05)
    raise AssertionError(f"no access line with {fields}: {access_lines(log)[-5:]}")


def requests_counted(metrics_url: str, **labels) -> float:
    text = httpx.get(metrics_url, timeout=10).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "turnpike_gateway_requests_total"
        and all(s.labels.get(k) == v for k, v in labels.items())
    )


def post(base: str, body: dict, key: str = KEY) -> httpx.Response:
    return httpx.post(
        f"{base}/v1/responses",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


def test_a_refused_create_is_counted_and_logged(gateway) -> None:
    base, log, metrics_url = gateway
    labels = {"route": "/v1/responses", "transport": "http", "status": "400"}
    before = requests_counted(metrics_url, code="previous_response_not_found", **labels)
    reply = post(base, {"input": SECRET_TEXT, "previous_response_id": "resp_missing"})
    assert reply.status_code == 400
    line = wait_for_line(log, request_id=reply.headers["x-request-id"])
    assert line["tenant"] == "team-a" and line["method"] == "POST"
    assert (line["route"], line["transport"], line["status"]) == ("/v1/responses", "http", 400)
    assert (line["code"], line["param"]) == ("previous_response_not_found", "previous_response_id")
    assert line["duration_ms"] >= 0
    after = requests_counted(metrics_url, code="previous_response_not_found", **labels)
    assert after - before == 1
    text = log.read_text()
    assert KEY not in text and KEY[-12:] not in text and SECRET_TEXT not in text


def test_served_streams_unknown_paths_and_bad_keys_each_have_their_line(gateway) -> None:
    base, log, metrics_url = gateway
    stream = post(base, {"input": "hi", "stream": True})
    assert stream.status_code == 200
    line = wait_for_line(log, request_id=stream.headers["x-request-id"])
    assert (line["transport"], line["status"], line["code"]) == ("sse", 200, None)
    missing = httpx.get(f"{base}/v1/responses/resp_x/nothing/here", timeout=10)
    line = wait_for_line(log, request_id=missing.headers["x-request-id"])
    assert (line["route"], line["status"]) == ("unmatched", 404)
    bad_key = post(base, {"input": "hi"}, key="sk-not-a-key-of-anyone")
    line = wait_for_line(log, request_id=bad_key.headers["x-request-id"])
    assert (line["tenant"], line["status"], line["code"]) == ("-", 401, "invalid_api_key")
    by_id = httpx.get(
        f"{base}/v1/responses/resp_nope", headers={"Authorization": f"Bearer {KEY}"}, timeout=10
    )
    line = wait_for_line(log, request_id=by_id.headers["x-request-id"])
    assert line["route"] == "/v1/responses/{response_id}"  # the template, not the id
    assert requests_counted(metrics_url, route="unmatched", status="404") >= 1
    assert "sk-not-a-key-of-anyone" not in log.read_text()


def test_websocket_creates_frames_and_upgrades_have_their_lines(gateway) -> None:
    base, log, metrics_url = gateway
    url = base.replace("http://", "ws://") + "/v1/responses"
    with ws_connect(url, additional_headers={"Authorization": f"Bearer {KEY}"}) as sock:
        sock.send(json.dumps({"type": "response.create", "input": "hi"}))
        while json.loads(sock.recv(timeout=60))["type"] != "response.completed":
            pass
        sock.send(
            json.dumps(
                {"type": "response.create", "input": SECRET_TEXT, "previous_response_id": "r_x"}
            )
        )
        assert json.loads(sock.recv(timeout=60))["type"] == "error"
        sock.send("not json")
        assert json.loads(sock.recv(timeout=60))["type"] == "error"
    wait_for_line(log, route="/v1/responses", transport="websocket", status=101, tenant="team-a")
    wait_for_line(log, route="response.create", status=200, tenant="team-a")
    refused = wait_for_line(log, route="response.create", status=400)
    assert refused["code"] == "previous_response_not_found"
    wait_for_line(log, route="websocket.frame", status=400, tenant="team-a")
    with pytest.raises(InvalidStatus):
        ws_connect(url, additional_headers={"Authorization": "Bearer sk-wrong"}).close()
    wait_for_line(log, route="/v1/responses", transport="websocket", status=401)
    labels = {"route": "response.create", "transport": "websocket", "status": "400"}
    assert requests_counted(metrics_url, code="previous_response_not_found", **labels) == 1
    assert SECRET_TEXT not in log.read_text()


def test_the_dashboard_shows_refusals(gateway) -> None:
    base, _, _ = gateway
    for _ in range(3):
        assert post(base, {"input": "hi", "conversation": "conv_missing"}).status_code == 404
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        data = httpx.get(f"{base}/dashboard/data", timeout=10).json()
        refusals = {(r["status"], r["code"]): r for r in data.get("refusals", [])}
        shown = refusals.get((404, "conversation_not_found"))
        if shown is not None and shown["total"] >= 3:
            assert data["now"]["refusals_total"] >= 3
            return
        time.sleep(0.5)
    raise AssertionError(f"the dashboard shows no refusals: {data.get('refusals')}")


def test_access_lines_can_be_turned_off_and_requests_are_still_counted(stack, tmp_path) -> None:
    proc, base, log, metrics_url = start(stack, tmp_path, TURNPIKE_ACCESS_LOG="false")
    try:
        assert post(base, {"input": "hi", "previous_response_id": "resp_x"}).status_code == 400
        assert requests_counted(metrics_url, route="/v1/responses", status="400") == 1
        assert access_lines(log) == []
    finally:
        stop(proc)
