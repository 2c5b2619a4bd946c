"""Bootstrap shared by every backend service: a ``grpc.aio`` server with the
standard health service, tracing, and graceful shutdown on SIGTERM/SIGINT
(health NOT_SERVING, drain in-flight calls for a grace period, stop)."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from turnpike import metrics, runtime, telemetry
from turnpike.config import GrpcServerSettings, log_level
from turnpike.grpc_malformed import MalformedRequestInterceptor
from turnpike.grpc_metrics import RpcMetricsInterceptor

log = logging.getLogger(__name__)

Register = Callable[[grpc.aio.Server], None]


def configure_logging() -> None:
    logging.basicConfig(
        level=log_level(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


async def serve(
    service_name: str,
    grpc_service_names: list[str],
    register: Register,
    settings: GrpcServerSettings,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run until SIGTERM/SIGINT. ``grpc_service_names`` are the full names
    reported SERVING by the health service (besides the overall "")."""
    telemetry.setup_tracing(service_name)
    options = [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        # A second server on a taken port must fail, not silently share it.
        ("grpc.so_reuseport", 0),
    ]
    # Innermost last: a request that does not parse is INVALID_ARGUMENT, counted as such.
    interceptors = [
        *telemetry.grpc_server_interceptors(),
        RpcMetricsInterceptor(),
        MalformedRequestInterceptor(),
    ]
    server = grpc.aio.server(interceptors=interceptors, options=options)
    register(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    address = f"{settings.host}:{settings.port}"
    server.add_insecure_port(address)
    await server.start()
    metrics_server = None
    if settings.metrics_port:
        endpoint = metrics.MetricsEndpoint(settings.host, settings.metrics_port)
        metrics_server = metrics.serve(endpoint)
    for name in ["", *grpc_service_names]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    log.info("%s serving on %s", service_name, address)
    runtime.tune_gc()  # start-up is done: what it built is long-lived

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()

    log.info(
        "%s shutting down: NOT_SERVING, draining for up to %.1fs",
        service_name,
        settings.shutdown_grace_s,
    )
    await health_servicer.enter_graceful_shutdown()
    await server.stop(settings.shutdown_grace_s)
    if on_shutdown is not None:
        await on_shutdown()
    if metrics_server is not None:
        metrics_server.shutdown()
    telemetry.shutdown_tracing()
    log.info("%s stopped", service_name)


def run(
    service_name: str,
    grpc_service_names: list[str],
    register: Register,
    settings: GrpcServerSettings,
    on_shutdown: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Entry point for ``python -m <service>``."""
    configure_logging()
    runtime.run(serve(service_name, grpc_service_names, register, settings, on_shutdown))
