"""A test OTLP/gRPC receiver (the collector's TraceService, the real protocol) and the
trace-shape helpers the tracing tests (local and container) use on what it received."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

SERVER = trace_pb2.Span.SPAN_KIND_SERVER
CLIENT = trace_pb2.Span.SPAN_KIND_CLIENT
SPAN_WAIT_S = 30.0

RPC = {
    "resolve": "/turnpike.router.v1.Router/ResolveModel",
    "classify": "/turnpike.safety.v1.Safety/Classify",
    "render": "/turnpike.tokenizer.v1.Tokenizer/Render",
    "route": "/turnpike.router.v1.Router/Route",
    "generate": "/turnpike.inference.v1.Inference/Generate",
    "proxy": "/turnpike.imageres.v1.ImageResolver/ProxyGenerate",
    "usage": "/turnpike.billing.v1.Billing/RecordUsage",
}


@dataclass(frozen=True)
class Span:
    service: str
    instance: str  # service.instance.id ("" when not set)
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str  # "" for a root
    attributes: dict
    links: tuple[tuple[str, str], ...]  # (trace id, span id)
    start_ns: int = 0
    end_ns: int = 0
    # Its events (name and attributes: a recorded exception's message) and status message.
    events: tuple[tuple[str, dict], ...] = ()
    status_message: str = ""


def _value(any_value) -> object:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, wait_s: float = SPAN_WAIT_S) -> None:
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._spans: list[Span] = []
        self._server: grpc.Server | None = None
        self.port = 0

    # -- the OTLP service ----------------------------------------------------------------

    def Export(self, request, context):
        received = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    received.append(
                        Span(
                            service=str(resource.get("service.name")),
                            instance=str(resource.get("service.instance.id") or ""),
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            links=tuple((ln.trace_id.hex(), ln.span_id.hex()) for ln in span.links),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            events=tuple(
                                (e.name, {a.key: _value(a.value) for a in e.attributes})
                                for e in span.events
                            ),
                            status_message=span.status.message,
                        )
                    )
        with self._lock:
            self._spans.extend(received)
        return trace_service_pb2.ExportTraceServiceResponse()

    def start(self, host: str) -> int:
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port(f"{host}:0")
        self._server.start()
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0)

    # -- reading -----------------------------------------------------------------------------

    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, what: str, found: Callable[[list[Span]], object]) -> object:
        """Poll until ``found(spans)`` is truthy (it is then returned), or fail."""
        deadline = time.monotonic() + self.wait_s
        while True:
            result = found(self.spans())
            if result:
                return result
            if time.monotonic() > deadline:
                summary = "\n".join(f"  {s.service} {s.name}" for s in self.spans()[-60:])
                pytest.fail(f"no {what} within {self.wait_s:g} s; last spans received:\n{summary}")
            time.sleep(0.1)

    def response_trace(self, response_id: str, services: set[str]) -> tuple[Span, list[Span]]:
        """The root span of the trace that holds the response (the gateway's span of the
        HTTP request or WebSocket message), and the trace's spans, once the root arrived
        and each of ``services`` reported a server span in it."""

        def complete(spans):
            response = response_span(spans, response_id)
            if response is None:
                return None
            members = trace_of(spans, response.trace_id)
            roots = [s for s in members if not s.parent_id]
            reported = {s.service for s in members if s.kind == SERVER} | {"gateway"}
            return (roots[0], members) if roots and services <= reported else None

        return self.wait_for(f"the trace of {response_id} across {sorted(services)}", complete)

    def worker_of(self, response_id: str) -> str:
        """The worker instance (worker-1, worker-2) that generated the response."""
        _, members = self.response_trace(response_id, {"worker"})
        [span] = server_spans(members, "worker", RPC["generate"])
        return span.instance


# -- trace shape ----------------------------------------------------------------------------


def response_span(spans: list[Span], response_id: str) -> Span | None:
    """The gateway's span of the response (it carries the response's id)."""
    for span in spans:
        if span.service == "gateway" and span.attributes.get("turnpike.response.id") == response_id:
            return span
    return None


def trace_of(spans: list[Span], trace_id: str) -> list[Span]:
    return [s for s in spans if s.trace_id == trace_id]


def server_spans(spans: list[Span], service: str, rpc: str) -> list[Span]:
    return [s for s in spans if s.service == service and s.kind == SERVER and s.name == rpc]


def parent_of(members: list[Span], span: Span) -> Span:
    [parent] = [s for s in members if s.span_id == span.parent_id]
    return parent


def check_hops(members: list[Span]) -> None:
    """Every backend server span is the child of its caller's client span for the same
    RPC (context crossed the hop), and every client span has exactly one server span."""
    by_id = {s.span_id: s for s in members}
    for span in members:
        if span.kind != SERVER or span.service == "gateway":
            continue
        parent = by_id.get(span.parent_id)
        assert parent is not None, f"{span.service} {span.name} has no parent in the trace"
        assert parent.kind == CLIENT and parent.name == span.name, (span, parent)
        assert parent.service != span.service, (span, parent)
    for span in members:
        if span.kind == CLIENT:
            children = [s for s in members if s.parent_id == span.span_id and s.kind == SERVER]
            assert len(children) == 1, f"client span {span.service} {span.name}: {children}"


def chain_to_root(members: list[Span], span: Span, root: Span) -> list[Span]:
    """The spans from ``span`` up to ``root`` (both included); fails if the chain breaks."""
    chain = [span]
    while chain[-1].span_id != root.span_id:
        chain.append(parent_of(members, chain[-1]))
    return chain
