"""Tracing in the container stack: every service exports OTLP (configured by the
standard OTEL_* variables of .env and compose.yaml) to a receiver in this test, and one
request is one trace, parent-child across every gRPC hop between containers, with
billing linked. Health checks (Docker's, every few seconds, and the router's probes of
the workers) leave no spans."""

from __future__ import annotations

import httpx
from support.otlp_receiver import (
    CLIENT,
    RPC,
    SERVER,
    chain_to_root,
    check_hops,
    parent_of,
    response_span,
    server_spans,
    trace_of,
)
from support.tools import QUESTION, WEATHER_TOOL, ask_over_websocket

DELIVERY = "billing.deliver_usage"


def create(stack, pipeline: str | None = None) -> dict:
    headers = {"Authorization": f"Bearer {stack.keys['dev']}"}
    if pipeline:
        headers["X-Turnpike-Pipeline"] = pipeline
    reply = httpx.post(
        f"{stack.base_url}/responses",
        headers=headers,
        json={"model": "turnpike-sim", "input": QUESTION, "tools": [WEATHER_TOOL]},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["status"] == "completed", body
    return body


def check_gateway_calls_sit_in_the_root(members, root) -> None:
    for span in members:
        if span.service == "gateway" and span.kind == CLIENT:
            assert chain_to_root(members, span, root)[-1] == root


def test_one_http_request_is_one_trace_across_the_containers(container_stack, otlp):
    body = create(container_stack)
    root, members = otlp.response_trace(
        body["id"], {"gateway", "safety", "tokenizer", "router", "worker"}
    )
    assert root.parent_id == "" and root.kind == SERVER
    check_hops(members)
    check_gateway_calls_sit_in_the_root(members, root)
    for service, rpc in [
        ("safety", "classify"),
        ("tokenizer", "render"),
        ("router", "route"),
        ("worker", "generate"),
    ]:
        [span] = server_spans(members, service, RPC[rpc])
        caller = parent_of(members, span)
        # A streaming call has a client span; a unary one's parent is the span that asked.
        assert caller.service == "gateway" and (caller.kind == CLIENT) == (rpc == "generate")
    [worker] = server_spans(members, "worker", RPC["generate"])
    assert worker.instance in ("worker-1", "worker-2")

    # Billing happens after the response, in a trace of its own LINKED to the response.
    response = response_span(members, body["id"])
    assert response is not None, body["id"]
    assert chain_to_root(members, response, root)[-1] == root

    def delivered(spans):
        for span in spans:
            if span.name == DELIVERY and (response.trace_id, response.span_id) in span.links:
                billing = server_spans(trace_of(spans, span.trace_id), "billing", RPC["usage"])
                return (span, billing) if billing else None
        return None

    delivery, billing = otlp.wait_for("the linked billing delivery", delivered)
    assert delivery.service == "gateway" and delivery.trace_id != root.trace_id
    billing_trace = trace_of(otlp.spans(), delivery.trace_id)
    check_hops(billing_trace)
    assert chain_to_root(billing_trace, billing[0], delivery)[-1] == delivery


def test_the_legacy_pipeline_traces_the_image_hop_and_billing(container_stack, otlp):
    body = create(container_stack, pipeline="legacy")
    root, members = otlp.response_trace(
        body["id"], {"gateway", "safety", "tokenizer", "router", "imageres", "worker", "billing"}
    )
    check_hops(members)
    # gateway -> imageres (ProxyGenerate) -> worker (Generate): one chain across 3 containers.
    [worker] = server_spans(members, "worker", RPC["proxied_generate"])
    proxy_call = parent_of(members, worker)
    assert proxy_call.service == "imageres" and proxy_call.kind == CLIENT
    proxy = parent_of(members, proxy_call)
    assert proxy.service == "imageres" and proxy.name == RPC["proxy"]
    assert parent_of(members, proxy).service == "gateway"
    [billing] = server_spans(members, "billing", RPC["usage"])
    assert chain_to_root(members, billing, root)[-1] == root


def test_one_websocket_response_is_one_trace(container_stack, otlp):
    event = ask_over_websocket(container_stack.ws_url, container_stack.keys["dev"], timeout=60)
    assert event["type"] == "response.completed", event
    root, members = otlp.response_trace(
        event["response"]["id"], {"gateway", "safety", "tokenizer", "router", "worker"}
    )
    assert root.parent_id == ""
    check_hops(members)
    check_gateway_calls_sit_in_the_root(members, root)


def test_health_checks_leave_no_spans(container_stack, otlp):
    # Docker has probed every container every 5 s since the stack started, and the
    # router probes both workers every second; the gateway's /readyz checks the backends.
    assert httpx.get(f"{container_stack.gateway}/readyz", timeout=10).status_code == 200
    create(container_stack)  # something is exported after the probes above
    spans = otlp.spans()
    assert spans
    assert not [s for s in spans if "health" in s.name.lower()]
    assert not [s for s in spans if "healthz" in s.name or "readyz" in s.name]
    roots = [s for s in spans if not s.parent_id]
    assert roots and all(s.service == "gateway" for s in roots), {
        (s.service, s.name) for s in roots
    }
