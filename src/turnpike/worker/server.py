"""gRPC adapter of the worker: one Generate stream per request, from its backend."""

from __future__ import annotations

import contextlib
import logging

import grpc

from turnpike.inference.v1 import inference_pb2, inference_pb2_grpc
from turnpike.worker import metrics
from turnpike.worker.backends import Backends, InvalidRequestError, error_event
from turnpike.worker.continuations import Continuations, UnknownContinuation

log = logging.getLogger(__name__)

SERVICE_NAME = inference_pb2.DESCRIPTOR.services_by_name["Inference"].full_name


class InferenceServicer(inference_pb2_grpc.InferenceServicer):
    def __init__(self, backends: Backends, continuations: Continuations | None = None) -> None:
        self._backends = backends
        self._continuations = continuations if continuations is not None else Continuations(0)

    async def Generate(self, request, context):
        # A continuation is rebuilt whole first (turnpike.worker.continuations): every
        # backend sees whole requests.
        continued = bool(request.continues)
        try:
            request = self._continuations.resolve(request)
        except UnknownContinuation as exc:
            log.info("continuation of %s sent whole again: %s", request.continues, exc)
            metrics.CONTINUATIONS.labels("unknown").inc()
            yield error_event("continuation_unknown", str(exc), retryable=True)
            return
        if continued:
            metrics.CONTINUATIONS.labels("resolved").inc()
        self._continuations.keep(request)
        metrics.KEPT_BYTES.set(self._continuations.bytes)
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
