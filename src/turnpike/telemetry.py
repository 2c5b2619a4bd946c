"""OpenTelemetry setup, driven only by the standard ``OTEL_*`` variables.

Tracing is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the traces-specific
variant) is set; otherwise every helper here is a cheap no-op, so the request
path pays nothing for telemetry nobody collects.

Call ``setup_tracing`` before creating any gRPC server or client channel: the
interceptors that create spans and carry the trace context across each hop are
chosen when the server or channel is built.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from typing import Any

import grpc
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


def _untraced_filter():
    from opentelemetry.instrumentation.grpc import filters

    # Health probes run every few hundred ms per peer: traces of them are noise.
    return filters.negate(filters.health_check())


def grpc_server_interceptors() -> list[Any]:
    """A server span per RPC, child of the caller's span (``traceparent`` metadata)."""
    if not _enabled:
        return []
    from opentelemetry.instrumentation.grpc import aio_server_interceptor

    return [aio_server_interceptor(filter_=_untraced_filter())]


def grpc_client_interceptors() -> list[Any]:
    """A client span per RPC that injects the trace context into the call's metadata."""
    if not _enabled:
        return []
    from opentelemetry.instrumentation.grpc import aio_client_interceptors

    stream_interceptor = _stream_span_interceptor_class()
    return [
        # Same tracer and filter, only the span's end differs.
        stream_interceptor(i._tracer, filter_=i._filter)
        if isinstance(i, grpc.aio.UnaryStreamClientInterceptor)
        else i
        for i in aio_client_interceptors(filter_=_untraced_filter())
    ]


# Span-ending tasks, referenced until they ran (the loop keeps only weak references).
_pending: set[asyncio.Task[None]] = set()


@functools.cache
def _stream_span_interceptor_class() -> type:
    """The stock server-streaming client interceptor ends its span only when the caller
    drains the stream to its very end; a caller that stops at its last expected message
    (the gateway stops at ``finished``) would leave it open until garbage collection.
    This one ends the span when the RPC ends (status received, cancelled or failed),
    however far the caller read."""
    from opentelemetry.instrumentation.grpc._aio_client import UnaryStreamAioClientInterceptor
    from opentelemetry.semconv._incubating.attributes.rpc_attributes import (
        RPC_GRPC_STATUS_CODE,
    )
    from opentelemetry.trace import Status, StatusCode

    async def end_with_status(span: trace.Span, call: grpc.aio.Call, end_time: int) -> None:
        try:
            code = await call.code()  # already known: the call is done
            span.set_attribute(RPC_GRPC_STATUS_CODE, code.value[0])
            if code != grpc.StatusCode.OK:
                span.set_status(Status(StatusCode.ERROR, await call.details()))
        finally:
            span.end(end_time=end_time)

    class StreamSpanInterceptor(UnaryStreamAioClientInterceptor):
        async def intercept_unary_stream(self, continuation, client_call_details, request):
            if self.tracing_skipped(client_call_details):
                return await continuation(client_call_details, request)
            with self._start_interceptor_span(client_call_details.method) as span:
                try:
                    call = await continuation(
                        self.propagate_trace_in_details(client_call_details), request
                    )
                except Exception as exc:
                    self.add_error_details_to_span(span, exc)
                    span.end()
                    raise

            def on_done(done_call: grpc.aio.Call) -> None:
                end_time = time.time_ns()
                try:
                    loop = asyncio.get_running_loop()
                except RuntimeError:  # the loop is gone (process exit): end without status
                    span.end(end_time=end_time)
                    return
                task = loop.create_task(end_with_status(span, done_call, end_time))
                _pending.add(task)
                task.add_done_callback(_pending.discard)

            call.add_done_callback(on_done)
            return call

    return StreamSpanInterceptor


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)
