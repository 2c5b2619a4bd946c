"""``python -m worker``: an inference worker (the CPU simulator) as a gRPC service."""

from __future__ import annotations

import logging
import sys

import grpc
from turnpike import grpc_server
from turnpike.config import GrpcServerSettings, WorkerSettings
from turnpike.inference.v1 import inference_pb2_grpc
from turnpike.vocab import harmony_encoding

from worker.backends import Backends
from worker.prefix_cache import PrefixCache
from worker.server import SERVICE_NAME, InferenceServicer
from worker.simulator import SimulatorBackend

log = logging.getLogger("worker")


def main() -> None:
    settings = WorkerSettings()
    grpc_server.configure_logging()
    try:
        simulator = SimulatorBackend(
            settings.worker_id,
            PrefixCache(settings.cache_tokens),
            error_rate=settings.error_rate,
            stall_after_tokens=settings.stall_after_tokens,
            encoding=harmony_encoding(),  # load the vocabulary before serving
        )
    except ValueError as exc:
        print(f"worker: configuration error: {exc}", file=sys.stderr)
        sys.exit(2)
    log.info(
        "worker %s: prefix cache %d tokens, error rate %.2f, stall after %d tokens",
        settings.worker_id,
        settings.cache_tokens,
        settings.error_rate,
        settings.stall_after_tokens,
    )

    def register(server: grpc.aio.Server) -> None:
        inference_pb2_grpc.add_InferenceServicer_to_server(
            InferenceServicer(Backends(default=simulator)), server
        )

    grpc_server.run(
        "worker",
        [SERVICE_NAME],
        register,
        GrpcServerSettings.for_service("TURNPIKE_WORKER_PORT", 50061),
    )


if __name__ == "__main__":
    main()
