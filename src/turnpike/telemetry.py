"""OpenTelemetry setup, driven only by the standard ``OTEL_*`` variables.

Tracing is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the traces-specific
variant) is set; otherwise every helper here is a cheap no-op, so the request
path pays nothing for telemetry nobody collects.

Call ``setup_tracing`` before creating any gRPC server or client channel: the server's
interceptors and the channels' tracing (``turnpike.grpc_tracing``), which create spans
and carry the trace context across each hop, are chosen when they are built.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry import trace

log = logging.getLogger(__name__)

_enabled = False


def _env(*names: str) -> str:
    for name in names:
        if value := os.environ.get(name, "").strip():
            return value
    return ""


def setup_tracing(default_service_name: str) -> bool:
    """Install an OTLP-exporting tracer provider if an endpoint is configured.

    Read by the SDK itself: ``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``,
    ``OTEL_TRACES_SAMPLER[_ARG]``, ``OTEL_BSP_*``, ``OTEL_PROPAGATORS`` and the
    exporter's ``OTEL_EXPORTER_OTLP_[TRACES_]{ENDPOINT,INSECURE,HEADERS,...}``.
    """
    global _enabled
    if _enabled:
        return True
    if _env("OTEL_SDK_DISABLED").lower() == "true":
        return False
    endpoint = _env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
    if not endpoint or _env("OTEL_TRACES_EXPORTER").lower() == "none":
        return False
    if (exporter := _env("OTEL_TRACES_EXPORTER").lower() or "otlp") != "otlp":
        log.warning("OTEL_TRACES_EXPORTER=%s is not supported; exporting OTLP", exporter)
    protocol = _env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL")
    if protocol and protocol != "grpc":
        log.warning("OTLP protocol %s is not supported; exporting OTLP over gRPC", protocol)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES win; the program's name is the fallback.
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: default_service_name}))
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _enabled = True
    log.info("tracing to %s as %s", endpoint, resource.attributes.get(SERVICE_NAME))
    return True


def enabled() -> bool:
    """Whether this process exports spans (``setup_tracing`` installed a provider)."""
    return _enabled


def is_noop(tracer: trace.Tracer) -> bool:
    """Whether ``tracer``'s spans would be dropped unseen: the API's proxy while this
    process exports nothing (a provider is installed only by ``setup_tracing``). A hot
    path then skips making them: an empty span still costs a context switch in and out,
    some microseconds a stage. (Asking the API for its provider reads the environment
    each time, which costs as much.)"""
    return not _enabled and isinstance(tracer, trace.ProxyTracer)


def shutdown_tracing() -> None:
    """Flush what is buffered and stop exporting (at process exit)."""
    provider = trace.get_tracer_provider()
    shutdown = getattr(provider, "shutdown", None)
    if shutdown is not None:
        shutdown()


def grpc_server_interceptors() -> list[Any]:
    """A server span per RPC, child of the caller's span (``traceparent`` metadata).
    (Clients are traced by ``turnpike.grpc_tracing``, without interceptors.)"""
    if not _enabled:
        return []
    from turnpike.grpc_tracing import ServerSpansInterceptor

    return [ServerSpansInterceptor()]


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)
