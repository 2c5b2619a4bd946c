"""OpenTelemetry setup, driven only by the standard ``OTEL_*`` variables.

Tracing is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the traces-specific
variant) is set; otherwise every helper here is a cheap no-op, so the request
path pays nothing for telemetry nobody collects.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from opentelemetry import trace

log = logging.getLogger(__name__)

_enabled = False


def tracing_enabled() -> bool:
    return _enabled


def setup_tracing(default_service_name: str) -> bool:
    """Install an OTLP-exporting tracer provider if an endpoint is configured."""
    global _enabled
    if not (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return False
    if os.environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return False
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES are read by Resource.create.
    resource = Resource.create({"service.name": default_service_name})
    if os.environ.get("OTEL_SERVICE_NAME"):
        resource = Resource.create()
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    _enabled = True
    log.info("tracing to %s", os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"))
    return True


def shutdown_tracing() -> None:
    provider = trace.get_tracer_provider()
    shutdown = getattr(provider, "shutdown", None)
    if shutdown is not None:
        shutdown()


def grpc_server_interceptors() -> list[Any]:
    if not _enabled:
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters

    return [aio_server_interceptor(filter_=filters.negate(filters.health_check()))]


def grpc_client_interceptors() -> list[Any]:
    if not _enabled:
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors, filters

    return list(aio_client_interceptors(filter_=filters.negate(filters.health_check())))


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)
