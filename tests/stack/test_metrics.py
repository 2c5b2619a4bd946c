"""Every service serves /metrics on its own port, and the gateway's figures follow real
traffic: outcomes, time to first token, end-to-end time, API overhead (also in the
``x-turnpike-overhead-ms`` header and the terminal event), stages, tokens, caches, safety
verdicts, WebSocket connections and the billing outbox."""

from __future__ import annotations

import time

import httpx
import pytest
from openai import OpenAI
from support.metrics_page import scrape
from support.sdk import turnpike_fields

from turnpike.catalogue import SERVICES, WORKER

pytestmark = pytest.mark.stack

MODEL = "turnpike-sim-4000"


def test_every_process_serves_its_metrics(stack):
    singles = {s.name for s in SERVICES if s is not WORKER}
    assert set(stack.metrics) == {*singles, *stack.workers}
    # The legacy pipeline calls every backend, image resolution's proxy included.
    OpenAI(base_url=stack.base_url, api_key=stack.api_key, max_retries=0).responses.create(
        model=MODEL, input="count every call", extra_headers={"x-turnpike-pipeline": "legacy"}
    )
    worker_methods: set[str] = set()
    for name, address in stack.metrics.items():
        page = scrape(address)
        if name == "gateway":
            assert page.types["turnpike_gateway_responses"] == "counter"
            continue
        assert page.types["turnpike_grpc_server_handling_seconds"] == "histogram"
        assert page.types["turnpike_grpc_server_handled"] == "counter"
        # Besides the health checks (Check), each backend counted calls of its own; the
        # turn went to one of the workers.
        methods = page.labels_of("turnpike_grpc_server_handled_total", "grpc_method") - {"Check"}
        if name in stack.workers:
            worker_methods |= methods
        else:
            assert methods, f"{name} counted no call of its own"
    assert "Generate" in worker_methods


def test_http_turns_are_counted_timed_and_carry_their_overhead(stack):
    before = scrape(stack.metrics["gateway"])
    alice = stack.api_keys["alice"]
    replies = []
    for i in range(3):
        reply = httpx.post(
            f"{stack.base_url}/responses",
            headers={"Authorization": f"Bearer {alice}"},
            json={"model": MODEL, "input": f"metrics turn {i}"},
            timeout=30,
        )
        assert reply.status_code == 200
        replies.append(reply)
    for reply in replies:
        body = reply.json()
        header = float(reply.headers["x-turnpike-overhead-ms"])
        assert header == pytest.approx(body["turnpike"]["overhead_ms"], abs=0.001)
        assert 0 < header < 10_000
    after = scrape(stack.metrics["gateway"])

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    http = {"transport": "http", "pipeline": "sprint"}
    assert (
        delta("turnpike_gateway_responses_total", tenant="alice", outcome="completed", **http) == 3
    )
    for histogram in (
        "gen_ai_server_time_to_first_token_seconds_count",
        "gen_ai_server_request_duration_seconds_count",
    ):
        assert delta(histogram, gen_ai_request_model=MODEL, **http) == 3, histogram
    assert delta("turnpike_gateway_api_overhead_seconds_count", model=MODEL, **http) == 3
    overhead_s = sum(r.json()["turnpike"]["overhead_ms"] for r in replies) / 1000
    # The header's figure is the one observed (rounded to a microsecond).
    assert delta("turnpike_gateway_api_overhead_seconds_sum", model=MODEL, **http) == (
        pytest.approx(overhead_s, abs=0.00001)
    )
    for stage in ("resolve_model", "safety", "render", "route", "generate", "finalize"):
        count = delta(
            "turnpike_gateway_stage_duration_seconds_count", pipeline="sprint", stage=stage
        )
        assert count == 3, stage
    tokens = {"model": MODEL, "pipeline": "sprint", "tenant": "alice"}
    usage = [r.json()["usage"] for r in replies]
    assert delta("turnpike_gateway_tokens_total", type="input", **tokens) == sum(
        u["input_tokens"] for u in usage
    )
    assert delta("turnpike_gateway_tokens_total", type="output", **tokens) == sum(
        u["output_tokens"] for u in usage
    )
    assert delta(
        "gen_ai_client_token_usage_sum", gen_ai_request_model=MODEL, gen_ai_token_type="output"
    ) == sum(u["output_tokens"] for u in usage)
    assert delta("turnpike_gateway_safety_verdicts_total", pipeline="sprint", verdict="allow") == 3
    assert after.types["turnpike_gateway_active_responses"] == "gauge"
    assert after.value("turnpike_gateway_active_responses") == 0


def test_refused_requests_are_counted_as_rejected(stack):
    before = scrape(stack.metrics["gateway"])
    reply = httpx.post(
        f"{stack.base_url}/responses",
        headers={"Authorization": f"Bearer {stack.api_key}"},
        json={"model": MODEL, "input": "x", "previous_response_id": "resp_nothing_here"},
        timeout=30,
    )
    assert reply.status_code == 400  # an unknown parent (the API answers 400 too)
    assert "x-turnpike-overhead-ms" in reply.headers
    after = scrape(stack.metrics["gateway"])
    name = "turnpike_gateway_responses_total"
    assert after.value(name, outcome="rejected") - before.value(name, outcome="rejected") == 1
    assert after.value("turnpike_gateway_active_responses") == 0


def test_every_http_response_carries_an_overhead_header(stack):
    reply = httpx.get(
        f"{stack.base_url}/models", headers={"Authorization": f"Bearer {stack.api_key}"}, timeout=10
    )
    assert reply.status_code == 200
    assert float(reply.headers["x-turnpike-overhead-ms"]) >= 0


def test_streamed_turns_report_the_overhead_in_their_terminal_event(stack):
    client = OpenAI(base_url=stack.base_url, api_key=stack.api_key, max_retries=0)
    raw = client.responses.with_raw_response.create(model=MODEL, input="stream me", stream=True)
    # The headers left before the turn ended: they carry the preparation's time.
    assert float(raw.headers["x-turnpike-overhead-ms"]) >= 0
    events = list(raw.parse())
    completed = events[-1]
    assert completed.type == "response.completed"
    assert turnpike_fields(completed.response)["overhead_ms"] > 0


def test_websocket_turns_count_connections_cache_hits_and_overhead(stack):
    before = scrape(stack.metrics["gateway"])
    client = OpenAI(base_url=stack.base_url, api_key=stack.api_key, max_retries=0)
    terminal = []
    with client.responses.connect() as conn:
        previous = None
        for i in range(3):
            conn.response.create(
                model=MODEL, input=f"socket turn {i}", previous_response_id=previous
            )
            for event in conn:
                if event.type == "response.completed":
                    terminal.append(event.response)
                    previous = event.response.id
                    break
        during = scrape(stack.metrics["gateway"])
        assert during.value("turnpike_gateway_websocket_connections") >= 1
    for response in terminal:
        assert turnpike_fields(response)["overhead_ms"] > 0
    deadline = time.monotonic() + 10
    while True:
        after = scrape(stack.metrics["gateway"])
        closed = after.value("turnpike_gateway_websocket_connections") == 0
        if closed or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert closed

    def delta(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    ws = {"transport": "websocket", "pipeline": "connection"}
    assert delta("turnpike_gateway_responses_total", outcome="completed", **ws) == 3
    assert delta("turnpike_gateway_api_overhead_seconds_count", **ws) == 3
    # Each follow-up found its parent in the connection's cache.
    hits = {"cache": "connection", "result": "hit"}
    assert delta("turnpike_gateway_cache_lookups_total", **hits) == 2


def test_billing_outbox_drains_and_billing_counts_what_it_recorded(stack):
    before = scrape(stack.metrics["billing"])
    OpenAI(base_url=stack.base_url, api_key=stack.api_key, max_retries=0).responses.create(
        model=MODEL, input="bill this"
    )
    deadline = time.monotonic() + 15
    while True:
        gateway, billing = scrape(stack.metrics["gateway"]), scrape(stack.metrics["billing"])
        drained = gateway.value("turnpike_gateway_billing_outbox_backlog") == 0
        name = "turnpike_billing_events_recorded_total"
        recorded = billing.value(name) - before.value(name) == 1
        if (drained and recorded) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert drained and recorded
    assert gateway.types["turnpike_gateway_billing_outbox_retries"] == "counter"
