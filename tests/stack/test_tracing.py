"""Tracing end to end: a stack of its own exports OTLP to a receiver in this test, and
one response must be one trace across every service, with parentage across every hop.

The receiver speaks real OTLP/gRPC (the collector's TraceService), so this checks the
exporters' configuration from the standard ``OTEL_*`` variables too.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import httpx
import pytest
from openai import OpenAI
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from support.billing_standin import RecordingBilling
from support.otlp_receiver import (
    CLIENT,
    RPC,
    SERVER,
    Receiver,
    Span,
    caller_of,
    check_hops,
    exporter_env,
    parent_of,
    response_span,
    server_spans,
    trace_of,
)
from support.sdk import response_usage
from support.tools import QUESTION, WEATHER_TOOL, ask_over_websocket

from turnpike.billing.v1 import billing_pb2
from turnpike.devstack import LocalStack, StackConfig, StackError
from turnpike.gateway.observability import tracing
from turnpike.gateway.pipeline.request_context import RequestContext
from turnpike.gateway.protocol.errors import ApiError, invalid
from turnpike.gateway.upstream import billing_outbox
from turnpike.gateway.upstream.billing_outbox import BillingOutbox
from turnpike.grpc_tracing import TracedChannel

HTTP_ROOT = "POST /v1/responses"  # FastAPI's span for the HTTP request
RESPONSE = "response.create"  # the gateway's span for one response
DELIVERY = "billing.deliver_usage"


@dataclass
class Traced:
    receiver: Receiver
    base_url: str
    ws_url: str
    api_key: str


@pytest.fixture(scope="module")
def traced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    """A stack that traces every stage of a response (TURNPIKE_TRACE_STAGES), and asks on
    session streams (TURNPIKE_SESSION_STREAMS)."""
    yield from traced_stack(
        tmp_path_factory, {"TURNPIKE_TRACE_STAGES": "true", "TURNPIKE_SESSION_STREAMS": "true"}
    )


@pytest.fixture(scope="module")
def traced_lean(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Traced]:
    """A stack that traces as it does by default: no span per stage, a call per service."""
    yield from traced_stack(tmp_path_factory, {})


def traced_stack(
    tmp_path_factory: pytest.TempPathFactory, settings: dict[str, str]
) -> Iterator[Traced]:
    receiver = Receiver(wait_s=15.0)
    port = receiver.start("127.0.0.1")
    config = StackConfig.private(
        tmp_path_factory.mktemp("traced-stack"),
        workers=1,
        # Every span exported within a fifth of a second, so the test waits little.
        extra_env={**exporter_env(port), **settings},
    )
    stack = LocalStack(config)
    try:
        stack.start()
    except StackError as exc:
        receiver.stop()
        pytest.fail(f"the traced stack did not start: {exc}", pytrace=False)
    endpoints = stack.endpoints
    try:
        serve_one_response(endpoints.base_url, endpoints.api_key)
        yield Traced(receiver, endpoints.base_url, endpoints.ws_url, endpoints.api_key)
    finally:
        stack.stop()
        receiver.stop()


def serve_one_response(base_url: str, api_key: str, within_s: float = 30.0) -> None:
    """Wait until the stack serves a response: "ready" means every process answers its
    health check, but the router may not have seen the worker come up yet (it polls)."""
    deadline = time.monotonic() + within_s
    with httpx.Client(base_url=base_url, timeout=10, trust_env=False) as http:
        while True:
            reply = http.post(
                "/responses",
                headers={"Authorization": f"Bearer {api_key}"},
                json={"model": "turnpike-sim", "input": "hi", "max_output_tokens": 16},
            )
            if reply.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    assert reply.status_code == 200, reply.text


# -- trace shape -----------------------------------------------------------------------


def wait_for_trace(traced: Traced, response_id: str, services: set[str]) -> tuple[Span, list]:
    """The response's span and its whole trace, once every service has reported."""

    def complete(spans):
        response = response_span(spans, response_id)
        if response is None:
            return None
        members = trace_of(spans, response.trace_id)
        reported = {s.service for s in members if s.kind == SERVER} | {"gateway"}
        known = {s.span_id for s in members}
        # A parent ends (and is exported) after its children: wait for every one.
        dangling = [s for s in members if s.parent_id and s.parent_id not in known]
        return (response, members) if services <= reported and not dangling else None

    return traced.receiver.wait_for(f"complete trace of {response_id}", complete)


def check_stages(response: Span, members: list[Span], expected: set[str]) -> dict[str, Span]:
    """Stage spans are the response span's children; each gateway RPC sits under its stage."""
    stages = {s.name: s for s in members if s.name.startswith("stage.")}
    assert expected <= set(stages), tree(members)
    for stage in stages.values():
        assert stage.service == "gateway" and stage.parent_id == response.span_id, tree(members)
    # Legacy calls safety and the tokenizer; the others ask on the connection's streams.
    legacy = response.attributes["turnpike.pipeline"] == "legacy"
    calls = [
        ("classify" if legacy else "classify_session", "stage.safety"),
        ("render" if legacy else "render_session", "stage.render"),
        ("route", "stage.route"),
    ]
    if legacy:
        # The other pipelines keep model configurations in process: no router call.
        calls.append(("resolve", "stage.resolve_model"))
    for rpc, stage_name in calls:
        assert caller_of(members, RPC[rpc]).parent_id == stages[stage_name].span_id, rpc
    return stages


def check_no_strays(spans: list[Span]) -> None:
    """No health check anywhere, and every root is a response or a billing delivery: a
    span that lost its context (a new root) or an untraced-by-design endpoint would show."""
    assert not [s for s in spans if "grpc.health" in s.name.lower()]
    assert not [s for s in spans if "healthz" in s.name or "readyz" in s.name]
    roots = [s for s in spans if not s.parent_id]
    assert roots
    for root in roots:
        assert root.service == "gateway", root
        assert root.name in (HTTP_ROOT, RESPONSE, DELIVERY), root


def check_no_orphans(receiver: Receiver) -> list[Span]:
    """Every span's parent arrives (a parent ends, so is exported, after its children)."""

    def complete(spans):
        known = {s.span_id for s in spans}
        return spans if not [s for s in spans if s.parent_id and s.parent_id not in known] else None

    return receiver.wait_for("the parent of every span", complete)


# -- the tests -------------------------------------------------------------------------


def test_one_http_response_is_one_trace_across_every_service(traced: Traced) -> None:
    # The probes the launcher made while starting, plus explicit ones, must stay untraced.
    with httpx.Client(base_url=traced.base_url.removesuffix("/v1"), trust_env=False) as http:
        assert http.get("/healthz").status_code == 200
        assert http.get("/readyz").status_code == 200
    with OpenAI(base_url=traced.base_url, api_key=traced.api_key, max_retries=0) as client:
        response = client.responses.create(
            model="turnpike-sim", input=QUESTION, tools=[WEATHER_TOOL]
        )
    assert response.status == "completed"
    assert [item.type for item in response.output][-1] == "function_call"

    span, members = wait_for_trace(
        traced, response.id, {"gateway", "safety", "tokenizer", "router", "worker"}
    )
    # FastAPI's span for the HTTP request is the root; the response's span its child.
    root = parent_of(members, span)
    assert root.name == HTTP_ROOT and root.parent_id == "" and root.kind == SERVER
    assert root.service == "gateway"
    assert root.attributes["http.response.status_code"] == 200
    assert span.name == RESPONSE
    assert span.attributes["turnpike.tenant"] == "dev"
    assert span.attributes["turnpike.pipeline"] == "sprint"
    assert span.attributes["turnpike.transport"] == "http"
    assert span.attributes["turnpike.model"] == "turnpike-sim"
    assert span.attributes["turnpike.response.status"] == "completed"
    # The OpenTelemetry GenAI conventions' attributes, beside Turnpike's own.
    assert span.attributes["gen_ai.operation.name"] == "chat"
    assert span.attributes["gen_ai.request.model"] == "turnpike-sim"
    assert span.attributes["gen_ai.response.id"] == response.id
    assert span.attributes["gen_ai.conversation.id"] == response.id  # its first response
    assert span.attributes["gen_ai.usage.input_tokens"] == response_usage(response).input_tokens
    assert span.attributes["gen_ai.usage.output_tokens"] == response_usage(response).output_tokens
    check_hops(members)
    stages = check_stages(
        span,
        members,
        {
            "stage.validate_history",
            "stage.resolve_model",
            "stage.safety",
            "stage.render",
            "stage.route",
            "stage.generate",
            "stage.finalize",
        },
    )
    [generate] = [s for s in members if s.service == "gateway" and s.name == RPC["generate"]]
    assert generate.kind == CLIENT and generate.parent_id == stages["stage.generate"].span_id
    [worker] = server_spans(members, "worker", RPC["generate"])
    assert worker.parent_id == generate.span_id
    # Background billing is not part of the response's trace ...
    assert not [s for s in members if s.service == "billing"]

    # ... but its delivery links to it, and billing's own span is below the delivery.
    def delivery(spans):
        for candidate in spans:
            if candidate.name == DELIVERY and (span.trace_id, span.span_id) in candidate.links:
                billing = server_spans(trace_of(spans, candidate.trace_id), "billing", RPC["usage"])
                return (candidate, billing) if billing else None
        return None

    deliver, [billing] = traced.receiver.wait_for("linked billing delivery", delivery)
    assert deliver.service == "gateway" and deliver.parent_id == ""
    assert deliver.trace_id != span.trace_id
    assert deliver.attributes["turnpike.billing.event_id"] == response.id
    billing_trace = trace_of(traced.receiver.spans(), deliver.trace_id)
    check_hops(billing_trace)
    assert parent_of(billing_trace, billing) == deliver  # a unary call: no client span
    check_no_strays(check_no_orphans(traced.receiver))


def test_the_legacy_pipeline_traces_the_image_hop(traced: Traced) -> None:
    reply = httpx.post(
        traced.base_url + "/responses",
        headers={
            "Authorization": f"Bearer {traced.api_key}",
            "X-Turnpike-Pipeline": "legacy",
        },
        json={"model": "turnpike-sim", "input": QUESTION, "tools": [WEATHER_TOOL]},
        timeout=30,
        trust_env=False,
    )
    assert reply.status_code == 200, reply.text
    response_id = reply.json()["id"]
    span, members = wait_for_trace(
        traced,
        response_id,
        {"gateway", "safety", "tokenizer", "router", "imageres", "worker", "billing"},
    )
    assert span.attributes["turnpike.pipeline"] == "legacy"
    assert parent_of(members, span).name == HTTP_ROOT
    check_hops(members)
    stages = check_stages(
        span, members, {"stage.safety", "stage.render", "stage.route", "stage.generate"}
    )
    # gateway -> imageres (ProxyGenerate) -> worker (Generate), one chain.
    [worker] = server_spans(members, "worker", RPC["proxied_generate"])
    proxy_call = parent_of(members, worker)
    assert proxy_call.service == "imageres" and proxy_call.kind == CLIENT
    proxy = parent_of(members, proxy_call)
    assert proxy.service == "imageres" and proxy.kind == SERVER and proxy.name == RPC["proxy"]
    gateway_call = parent_of(members, proxy)
    assert gateway_call.service == "gateway" and gateway_call.kind == CLIENT
    assert gateway_call.parent_id == stages["stage.generate"].span_id
    # Legacy bills before the terminal event, on the response's own path.
    [billing] = server_spans(members, "billing", RPC["usage"])
    assert parent_of(members, billing) == stages["stage.finalize"]  # a unary call
    check_no_strays(check_no_orphans(traced.receiver))


def test_one_websocket_response_is_one_trace(traced: Traced) -> None:
    event = ask_over_websocket(traced.ws_url, traced.api_key, timeout=30)
    assert event["type"] == "response.completed", event
    response_id = event["response"]["id"]
    span, members = wait_for_trace(
        traced, response_id, {"gateway", "safety", "tokenizer", "router", "worker"}
    )
    # No span per connection: the response's own span is the root of its trace.
    assert span.name == RESPONSE and span.parent_id == "" and span.kind == SERVER
    assert span.attributes["turnpike.transport"] == "websocket"
    assert span.attributes["turnpike.pipeline"] == "connection"
    check_hops(members)
    check_stages(span, members, {"stage.safety", "stage.render", "stage.generate"})
    check_no_strays(check_no_orphans(traced.receiver))


def test_by_default_a_response_traces_its_hops_and_times_its_stages(
    traced_lean: Traced,
) -> None:
    event = ask_over_websocket(traced_lean.ws_url, traced_lean.api_key, timeout=30)
    assert event["type"] == "response.completed", event
    span, members = wait_for_trace(
        traced_lean,
        event["response"]["id"],
        {"gateway", "safety", "tokenizer", "router", "worker"},
    )
    assert span.name == RESPONSE and span.parent_id == "" and span.kind == SERVER
    check_hops(members)
    # No span per stage: each call to a service is the response's child, and each
    # stage's time is an attribute of the response's span.
    assert not [s for s in members if s.name.startswith("stage.")], tree(members)
    for rpc in ("classify", "render", "generate"):
        assert caller_of(members, RPC[rpc]).parent_id == span.span_id, tree(members)
    for stage in ("safety", "render", "generate"):
        assert span.attributes[f"turnpike.stage.{stage}_ms"] >= 0, span.attributes
    check_no_strays(check_no_orphans(traced_lean.receiver))


def tree(members: list[Span]) -> str:
    """The trace as an indented outline (for failure messages)."""
    kinds: dict[int, str] = {SERVER: "server", CLIENT: "client"}
    lines: list[str] = []

    def walk(parent_id: str, depth: int) -> None:
        for span in sorted(members, key=lambda s: s.start_ns):
            if span.parent_id == parent_id:
                ms = (span.end_ns - span.start_ns) / 1e6
                kind = kinds.get(span.kind, "internal")
                lines.append(f"{'  ' * depth}{span.service}: {span.name} [{kind}] {ms:.1f} ms")
                walk(span.span_id, depth + 1)

    known = {s.span_id for s in members}
    for span in members:
        if not span.parent_id or span.parent_id not in known:
            walk(span.parent_id, 0)
            break
    return "\n".join(lines)


# -- in-process pieces, with a local tracer provider (the global one stays untouched) -------


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


@pytest.fixture
def local_tracer(provider: TracerProvider):
    return provider.get_tracer("test")


class EndedSpans(SpanProcessor):
    """Spans as they end, to await them (they end in the event loop's thread)."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[ReadableSpan] = asyncio.Queue()

    def on_end(self, span: ReadableSpan) -> None:
        self.queue.put_nowait(span)

    async def next(self) -> ReadableSpan:
        return await asyncio.wait_for(self.queue.get(), 5)


async def test_a_server_stream_span_ends_with_the_rpc_however_far_the_caller_read(
    provider, local_tracer
) -> None:
    """The gateway stops reading at the worker's ``finished`` event; the client span must
    end anyway (with the RPC's status), and the call must carry the trace context."""
    seen_metadata: list[dict[str, str]] = []

    async def stream(request: bytes, context: grpc.aio.ServicerContext):
        seen_metadata.append({m.key: m.value for m in context.invocation_metadata()})
        if request == b"fail":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "worker gone")
        for chunk in (b"a", b"b", b"finished"):
            yield chunk

    handler = grpc.method_handlers_generic_handler(
        "test.Streams", {"Stream": grpc.unary_stream_rpc_method_handler(stream)}
    )
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([handler])
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    ended = EndedSpans()
    provider.add_span_processor(ended)
    try:
        async with TracedChannel(
            grpc.aio.insecure_channel(f"127.0.0.1:{port}"), local_tracer
        ) as channel:
            call_stream = channel.unary_stream("/test.Streams/Stream")
            async for chunk in call_stream(b"go", timeout=5):
                if chunk == b"finished":
                    break  # like the gateway: stop at the last expected message
            ok = await ended.next()
            with pytest.raises(grpc.aio.AioRpcError):
                async for _ in call_stream(b"fail", timeout=5):
                    pass
            failed = await ended.next()
    finally:
        await server.stop(None)
    assert ok.name == failed.name == "/test.Streams/Stream"
    assert ok.attributes is not None and failed.attributes is not None
    assert ok.kind == SpanKind.CLIENT
    assert ok.attributes["rpc.grpc.status_code"] == grpc.StatusCode.OK.value[0]
    assert ok.status.status_code == StatusCode.UNSET
    assert failed.attributes["rpc.grpc.status_code"] == grpc.StatusCode.UNAVAILABLE.value[0]
    assert failed.status.status_code == StatusCode.ERROR
    # The server got each call's own span as its parent (W3C traceparent).
    for span, metadata in zip((ok, failed), seen_metadata, strict=True):
        assert metadata["traceparent"].split("-")[1:3] == [
            f"{span.context.trace_id:032x}",
            f"{span.context.span_id:016x}",
        ]


class FlakyBilling(RecordingBilling):
    """A billing stand-in whose RecordUsage is unavailable ``failures`` times, then records."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def RecordUsage(
        self, request: billing_pb2.UsageEvent, /, timeout: float | None = None
    ) -> billing_pb2.RecordUsageResponse:
        if self.failures:
            self.failures -= 1
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(), "down"
            )
        return await super().RecordUsage(request, timeout=timeout)


async def test_each_billing_delivery_attempt_is_a_new_trace_linked_to_the_response(
    local_tracer, exporter, monkeypatch
) -> None:
    monkeypatch.setattr(billing_outbox, "tracer", local_tracer)
    stub = FlakyBilling(failures=1)
    outbox = BillingOutbox(stub)
    outbox.start()
    with local_tracer.start_as_current_span("response.create") as response:
        await outbox.submit(billing_pb2.UsageEvent(event_id="resp_1", tenant="dev"))
    await outbox.close(timeout=5)
    assert [e.event_id for e in stub.events] == ["resp_1"]
    deliveries = [s for s in exporter.get_finished_spans() if s.name == "billing.deliver_usage"]
    assert [s.attributes["turnpike.attempt"] for s in deliveries] == [1, 2]
    assert deliveries[0].status.status_code == StatusCode.ERROR
    assert deliveries[1].status.status_code == StatusCode.UNSET
    for span in deliveries:
        assert span.parent is None
        assert span.context.trace_id != response.get_span_context().trace_id
        assert [link.context for link in span.links] == [response.get_span_context()]
        assert span.attributes["turnpike.billing.event_id"] == "resp_1"


async def test_untraced_events_are_delivered_without_links(local_tracer, exporter, monkeypatch):
    monkeypatch.setattr(billing_outbox, "tracer", local_tracer)
    outbox = BillingOutbox(FlakyBilling(failures=0))
    outbox.start()
    await outbox.submit(billing_pb2.UsageEvent(event_id="resp_2"))  # no span is current
    await outbox.close(timeout=5)
    [span] = exporter.get_finished_spans()
    assert span.links == ()


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (invalid("Bad input.", "input", "invalid_value"), StatusCode.UNSET),
        (ApiError(503, "Backend down.", type="server_error", code="unavailable"), StatusCode.ERROR),
        (RuntimeError("boom"), StatusCode.ERROR),
    ],
)
def test_a_response_that_fails_to_prepare_ends_its_span(
    local_tracer, exporter, monkeypatch, error: Exception, status: StatusCode
) -> None:
    """Only server-side failures mark the span as an error; a client's 4xx does not."""
    monkeypatch.setattr(tracing, "tracer", local_tracer)
    ctx = RequestContext(tenant="dev", pipeline="sprint")
    with pytest.raises(type(error)):
        with tracing.response_span(ctx, "turnpike-sim"):
            raise error
    [span] = exporter.get_finished_spans()
    assert span.name == "response.create" and span.kind == SpanKind.SERVER
    assert span.status.status_code == status
    assert span.attributes["turnpike.tenant"] == "dev"


def test_a_prepared_response_span_stays_open_until_the_response_finishes(
    local_tracer, exporter, monkeypatch
) -> None:
    monkeypatch.setattr(tracing, "tracer", local_tracer)
    ctx = RequestContext(tenant="dev", pipeline="sprint")
    with local_tracer.start_as_current_span("POST /v1/responses") as http_span:
        with tracing.response_span(ctx, "turnpike-sim") as span:
            assert span is ctx.span
    assert [s.name for s in exporter.get_finished_spans()] == ["POST /v1/responses"]
    tracing.end_response_span(
        ctx.span,
        {
            "id": "resp_1",
            "model": "turnpike-sim",
            "status": "failed",
            "usage": None,
            "error": {"code": "server_error", "message": "The model failed."},
        },
    )
    finished = exporter.get_finished_spans()[-1]
    # The OpenTelemetry GenAI conventions' attributes.
    assert finished.attributes["gen_ai.operation.name"] == "chat"
    assert finished.attributes["gen_ai.request.model"] == "turnpike-sim"
    assert finished.attributes["gen_ai.response.id"] == "resp_1"
    assert finished.name == "response.create" and finished.kind == SpanKind.INTERNAL
    assert finished.parent.span_id == http_span.get_span_context().span_id
    assert finished.status.status_code == StatusCode.ERROR
    assert finished.attributes["turnpike.response.status"] == "failed"


CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
DONE = {"id": "resp_1", "model": "turnpike-sim", "status": "completed"}


def test_a_websocket_response_joins_the_trace_its_client_metadata_names(
    local_tracer, exporter, monkeypatch
) -> None:
    """Codex sends the turn's W3C trace context inside ``client_metadata`` (a socket
    message has no headers): the response's span is a child of the client's span."""
    monkeypatch.setattr(tracing, "tracer", local_tracer)
    ctx = RequestContext(tenant="dev", pipeline="connection", transport="websocket")
    meta = {
        "ws_request_header_traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01",
        "ws_request_header_tracestate": "codex=1",
    }
    with tracing.response_span(ctx, "turnpike-sim", meta):
        pass
    tracing.end_response_span(ctx.span, DONE)
    [span] = exporter.get_finished_spans()
    assert span.kind == SpanKind.SERVER
    assert span.context.trace_id == int(CLIENT_TRACE, 16)
    assert span.parent is not None and span.parent.span_id == int(CLIENT_SPAN, 16)
    assert span.parent.is_remote
    assert span.context.trace_state.get("codex") == "1"


@pytest.mark.parametrize(
    "meta",
    [{}, {"ws_request_header_traceparent": "not-a-traceparent"}, {"other": "x"}],
)
def test_without_a_valid_client_traceparent_a_websocket_response_is_a_root(
    local_tracer, exporter, monkeypatch, meta
) -> None:
    monkeypatch.setattr(tracing, "tracer", local_tracer)
    ctx = RequestContext(tenant="dev", pipeline="connection", transport="websocket")
    with tracing.response_span(ctx, "turnpike-sim", meta):
        pass
    tracing.end_response_span(ctx.span, DONE)
    [span] = exporter.get_finished_spans()
    assert span.parent is None and span.kind == SpanKind.SERVER


def test_over_http_the_request_span_stays_the_parent(local_tracer, exporter, monkeypatch) -> None:
    """Over HTTP the request's own traceparent header parents the request span; the
    response span stays its child whatever ``client_metadata`` says."""
    monkeypatch.setattr(tracing, "tracer", local_tracer)
    ctx = RequestContext(tenant="dev", pipeline="sprint")
    meta = {"ws_request_header_traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
    with local_tracer.start_as_current_span("POST /v1/responses") as http_span:
        with tracing.response_span(ctx, "turnpike-sim", meta):
            pass
    tracing.end_response_span(ctx.span, DONE)
    finished = exporter.get_finished_spans()[-1]
    assert finished.parent.span_id == http_span.get_span_context().span_id
