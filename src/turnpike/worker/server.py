"""gRPC adapter of the worker: one Generate stream per request, from its backend."""

from __future__ import annotations

import contextlib
import logging

import grpc

from turnpike.inference.v1 import inference_pb2, inference_pb2_grpc
from turnpike.worker import metrics
from turnpike.worker.backends import Backends, InvalidRequestError, error_event

log = logging.getLogger(__name__)

SERVICE_NAME = inference_pb2.DESCRIPTOR.services_by_name["Inference"].full_name


class InferenceServicer(inference_pb2_grpc.InferenceServicer):
    def __init__(self, backends: Backends) -> None:
        self._backends = backends

    async def Generate(self, request, context):
        if not request.model:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "model is required")
        try:
            backend = self._backends.for_request(request)
        except InvalidRequestError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        # Waiting until its first token, running from then on (metrics, docs/observability.md).
        meter = metrics.REQUESTS[Backends.name_for(request)]
        meter.waiting.inc()
        sent = False
        first_tokens = 0  # the first delta's tokens; 0 until it leaves
        last = None
        try:
            # A dropped caller cancels this task: the backend stops at its next await.
            async with contextlib.aclosing(backend.generate(request)) as events:
                try:
                    async for event in events:
                        sent = True
                        if not first_tokens and event.HasField("delta"):
                            first_tokens = event.delta.tokens or 1
                            meter.started()
                        last = event
                        yield event
                except InvalidRequestError as exc:
                    if not sent:
                        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                    yield error_event("invalid_request", str(exc), retryable=False)
                except Exception:
                    # The stream must still end with exactly one terminal event.
                    log.exception("generation %s failed", request.request_id)
                    yield error_event(
                        "model_error", "The backend failed unexpectedly.", retryable=True
                    )
        finally:
            meter.ended(last, first_tokens)
