"""``python -m turnpike.worker``: an inference worker as a gRPC service: the CPU simulator, the
Cerebras backend when ``CEREBRAS_API_KEY`` is set, and the OpenAI-compatible backend
when ``TURNPIKE_OPENAI_COMPAT_BASE_URL`` is set."""

from __future__ import annotations

import logging

import grpc

from turnpike import grpc_server
from turnpike.backend_names import CEREBRAS, OPENAI_COMPATIBLE, SIMULATOR
from turnpike.config import ConfigError, GrpcServerSettings, WorkerSettings, exit_on_config_error
from turnpike.inference.v1 import inference_pb2_grpc
from turnpike.vocab import harmony_encoding
from turnpike.worker.backends import Backend, Backends, UnavailableBackend
from turnpike.worker.cerebras import CerebrasBackend
from turnpike.worker.continuations import Continuations
from turnpike.worker.openai_compatible import OpenAICompatibleBackend
from turnpike.worker.prefix_cache import PrefixCache
from turnpike.worker.server import SERVICE_NAME, InferenceServicer
from turnpike.worker.simulator import SimulatorBackend

log = logging.getLogger("worker")


def main() -> None:
    server_settings = GrpcServerSettings.for_service("worker")
    settings = WorkerSettings()
    grpc_server.configure_logging()
    try:
        simulator = SimulatorBackend(
            settings.worker_id,
            PrefixCache(settings.cache_tokens),
            error_rate=settings.error_rate,
            stall_after_tokens=settings.stall_after_tokens,
            encoding=harmony_encoding(),  # load the vocabulary before serving
            delta_interval=settings.delta_interval_ms / 1000,
            delta_tokens=settings.delta_max_tokens,
        )
        cerebras = CerebrasBackend.from_settings(settings)
        openai_compatible = OpenAICompatibleBackend.from_settings(settings)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    log.info(
        "worker %s: prefix cache %d tokens, error rate %.2f, stall after %d tokens, "
        "cerebras backend %s, openai-compatible backend %s",
        settings.worker_id,
        settings.cache_tokens,
        settings.error_rate,
        settings.stall_after_tokens,
        "configured" if cerebras else "off (CEREBRAS_API_KEY not set)",
        "configured" if openai_compatible else "off (TURNPIKE_OPENAI_COMPAT_BASE_URL not set)",
    )
    by_name: dict[str, Backend] = {
        SIMULATOR: simulator,
        CEREBRAS: cerebras
        or UnavailableBackend(
            "The cerebras backend is not configured on this worker (CEREBRAS_API_KEY is not set)."
        ),
        OPENAI_COMPATIBLE: openai_compatible
        or UnavailableBackend(
            "The openai-compatible backend is not configured on this worker "
            "(TURNPIKE_OPENAI_COMPAT_BASE_URL is not set)."
        ),
    }

    def register(server: grpc.aio.Server) -> None:
        inference_pb2_grpc.add_InferenceServicer_to_server(
            InferenceServicer(Backends(by_name), Continuations(settings.kept_bytes)), server
        )

    async def on_shutdown() -> None:
        if cerebras is not None:
            await cerebras.aclose()
        if openai_compatible is not None:
            await openai_compatible.aclose()

    grpc_server.run(
        "worker",
        [SERVICE_NAME],
        register,
        server_settings,
        on_shutdown,
    )


if __name__ == "__main__":
    with exit_on_config_error("worker"):
        main()
