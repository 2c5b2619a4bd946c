"""``python -m turnpike.router``: the model registry and worker router as a gRPC service."""

from __future__ import annotations

import grpc

from turnpike import grpc_server
from turnpike.config import ConfigError, GrpcServerSettings, RouterSettings, exit_on_config_error
from turnpike.router.health import HealthMonitor
from turnpike.router.registry import ModelRegistry, RegistryError, load_models
from turnpike.router.routing import WorkerRouter, parse_workers
from turnpike.router.server import SERVICE_NAME, RouterServicer
from turnpike.router.v1 import router_pb2_grpc


def main() -> None:
    settings = RouterSettings()
    try:
        registry = ModelRegistry(load_models(settings.models_file))
    except RegistryError as exc:
        raise ConfigError.invalid("TURNPIKE_MODELS_FILE", settings.models_file, str(exc)) from exc
    try:
        workers = parse_workers(settings.workers)
    except ValueError as exc:
        raise ConfigError.invalid("TURNPIKE_WORKERS", ",".join(settings.workers), str(exc)) from exc
    router = WorkerRouter(
        workers,
        affinity_capacity=settings.affinity_capacity,
        load_window_s=settings.load_window_s,
    )
    monitor = HealthMonitor(router, settings.health_interval_s)

    def register(server: grpc.aio.Server) -> None:
        router_pb2_grpc.add_RouterServicer_to_server(
            RouterServicer(registry, router, monitor), server
        )
        # Called inside the server's event loop, before it starts serving.
        monitor.start()

    grpc_server.run(
        "router",
        [SERVICE_NAME],
        register,
        GrpcServerSettings.for_service("router"),
        on_shutdown=monitor.close,
    )


if __name__ == "__main__":
    with exit_on_config_error("router"):
        main()
