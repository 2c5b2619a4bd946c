"""A test OTLP/gRPC receiver (``bench.otlp``'s, the collector's TraceService over the real
protocol, which fails the test when spans do not arrive) and the trace-shape helpers the
tracing tests (local and container) use on what it received."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TypeVar

import pytest
from support.paths import REPO_ROOT

# bench/ is not installed: it is imported from the repository's root.
_ROOT = str(REPO_ROOT)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench import otlp  # noqa: E402
from bench.otlp import CLIENT, SERVER, Span  # noqa: E402
from bench.otlp import exporter_env as exporter_env  # noqa: E402  (re-exported for the tests)

__all__ = ["CLIENT", "RPC", "SERVER", "Receiver", "Span"]

SPAN_WAIT_S = 30.0
T = TypeVar("T")

RPC = {
    "resolve": "/turnpike.router.v1.Router/ResolveModel",
    "classify": "/turnpike.safety.v1.Safety/Classify",
    "render": "/turnpike.tokenizer.v1.Tokenizer/Render",
    # A turn asked on its connection's session streams (sprint and connection pipelines):
    # the service's span of the exchange (there is no client span).
    "classify_session": "turnpike.safety.v1.Safety/ClassifySession exchange",
    "render_session": "turnpike.tokenizer.v1.Tokenizer/RenderSession exchange",
    "route": "/turnpike.router.v1.Router/Route",
    # The gateway asks a worker for batched events; the image hop (legacy) for single ones.
    "generate": "/turnpike.inference.v1.Inference/GenerateBatched",
    "proxied_generate": "/turnpike.inference.v1.Inference/Generate",
    "proxy": "/turnpike.imageres.v1.ImageResolver/ProxyGenerate",
    "usage": "/turnpike.billing.v1.Billing/RecordUsage",
}


class Receiver(otlp.Receiver):
    def __init__(self, wait_s: float = SPAN_WAIT_S) -> None:
        super().__init__()
        self.wait_s = wait_s

    def wait_for(self, what: str, found: Callable[[list[Span]], T | None]) -> T:
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
    """Every backend server span is the child of a span of its caller (context crossed the
    hop): of the caller's client span for the same RPC (a streaming call), or of the span
    that asked (a unary call, or an exchange on a session stream: no client span of its
    own, turnpike.grpc_tracing); and every client span has exactly one server span."""
    by_id = {s.span_id: s for s in members}
    for span in members:
        if span.kind != SERVER or span.service == "gateway":
            continue
        parent = by_id.get(span.parent_id)
        assert parent is not None, f"{span.service} {span.name} has no parent in the trace"
        assert parent.service != span.service, (span, parent)
        if parent.kind == CLIENT:
            assert parent.name == span.name, (span, parent)
    for span in members:
        if span.kind == CLIENT:
            children = [s for s in members if s.parent_id == span.span_id and s.kind == SERVER]
            assert len(children) == 1, f"client span {span.service} {span.name}: {children}"


def caller_of(members: list[Span], rpc: str, service: str = "gateway") -> Span:
    """What ``service`` made of its call ``rpc``: its client span (a streaming call), or
    else the server span of the call, whose parent is the caller's span that asked."""
    clients = [s for s in members if s.service == service and s.kind == CLIENT and s.name == rpc]
    if clients:
        [client] = clients
        return client
    [served] = [s for s in members if s.kind == SERVER and s.name == rpc]
    return served


def chain_to_root(members: list[Span], span: Span, root: Span) -> list[Span]:
    """The spans from ``span`` up to ``root`` (both included); fails if the chain breaks."""
    chain = [span]
    while chain[-1].span_id != root.span_id:
        chain.append(parent_of(members, chain[-1]))
    return chain
