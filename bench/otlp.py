"""A small OTLP/gRPC trace receiver (the collector's TraceService, the real protocol) on
loopback: a benchmark points a stack's ``OTEL_*`` variables at it and reads the spans the
services exported. The tracing tests extend it (tests/support/otlp_receiver.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from typing import TypeVar

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.trace.v1 import trace_pb2

SERVER = trace_pb2.Span.SPAN_KIND_SERVER
CLIENT = trace_pb2.Span.SPAN_KIND_CLIENT
T = TypeVar("T")


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


def exporter_env(port: int, host: str = "127.0.0.1", delay_ms: int = 200) -> dict[str, str]:
    """The ``OTEL_*`` settings that make a service export every span to a receiver on
    ``host``:``port``, within ``delay_ms`` of its end."""
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{host}:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
        "OTEL_PROPAGATORS": "tracecontext,baggage",
        "OTEL_SDK_DISABLED": "false",
        "OTEL_BSP_SCHEDULE_DELAY": str(delay_ms),
    }


class Receiver(trace_service_pb2_grpc.TraceServiceServicer):
    """Keeps every span exported to it, in arrival order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spans: list[Span] = []
        self._server: grpc.Server | None = None
        self.port = 0

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

    def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on ``host``:``port`` (0: a free port) and return the port."""
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port(f"{host}:{port}")
        self._server.start()
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0)
            self._server = None

    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def poll(self, found: Callable[[list[Span]], T], within_s: float) -> T | None:
        """``found(spans)`` once it is truthy, or None after ``within_s``."""
        deadline = time.monotonic() + within_s
        while True:
            result = found(self.spans())
            if result or time.monotonic() > deadline:
                return result or None
            time.sleep(0.1)
