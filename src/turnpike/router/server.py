"""gRPC adapter of the router: proto in, registry and routing decisions out."""

from __future__ import annotations

import grpc

from turnpike.router.health import HealthMonitor
from turnpike.router.registry import ModelEntry, ModelRegistry, UnknownModelError
from turnpike.router.routing import NoHealthyWorkerError, WorkerRouter
from turnpike.router.v1 import router_pb2, router_pb2_grpc

SERVICE_NAME = router_pb2.DESCRIPTOR.services_by_name["Router"].full_name


def model_config(entry: ModelEntry) -> router_pb2.ModelConfig:
    return router_pb2.ModelConfig(
        id=entry.id,
        aliases=entry.aliases,
        backend=entry.backend,
        owned_by=entry.owned_by,
        context_window=entry.context_window,
        max_output_tokens=entry.max_output_tokens,
        tokens_per_second=entry.tokens_per_second,
        ttft_ms=entry.ttft_ms,
        prefill_tokens_per_second=entry.prefill_tokens_per_second,
        created=entry.created,
    )


class RouterServicer(router_pb2_grpc.RouterServicer):
    def __init__(
        self, registry: ModelRegistry, router: WorkerRouter, monitor: HealthMonitor
    ) -> None:
        self._registry = registry
        self._router = router
        self._monitor = monitor
        # Proto form of each model, built once: every Route returns one.
        self._configs = {e.id: model_config(e) for e in registry.models()}

    async def ListModels(self, request, context):
        return router_pb2.ListModelsResponse(
            models=[self._configs[e.id] for e in self._registry.models()]
        )

    async def ResolveModel(self, request, context):
        entry = await self._resolve(request.model, context)
        return self._configs[entry.id]

    async def Route(self, request, context):
        entry = await self._resolve(request.model, context)
        if request.prompt_tokens < 0:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "prompt_tokens must be >= 0")
        if not self._router.any_healthy():
            # Nothing known up (just started, or all down): look again before failing.
            await self._monitor.check_now()
        try:
            decision = self._router.route(
                request.affinity_key, request.prompt_tokens, request.exclude_workers
            )
        except NoHealthyWorkerError:
            await context.abort(
                grpc.StatusCode.UNAVAILABLE, f"no healthy worker for model {entry.id}"
            )
        return router_pb2.RouteDecision(
            model=self._configs[entry.id],
            worker_id=decision.worker_id,
            worker_address=decision.worker_address,
            affinity_hit=decision.affinity_hit,
        )

    async def _resolve(self, name: str, context: grpc.aio.ServicerContext) -> ModelEntry:
        if not name:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "model is required")
        try:
            return self._registry.resolve(name)
        except UnknownModelError as exc:
            await context.abort(grpc.StatusCode.NOT_FOUND, str(exc))
            raise  # unreachable: abort raises
