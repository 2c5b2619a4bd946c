"""gRPC adapter of the worker: one Generate stream per request, from its backend; or,
on GenerateBatched, the same events with those due at the same moment in one message
(the backend's events are read by a task of their own, and each message takes what it
has found since the last)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

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
        async for event in self._generate(request, context):
            yield event

    async def GenerateBatched(self, request, context):
        found: deque[inference_pb2.GenerateEvent] = deque()
        more = asyncio.Event()
        ended = False

        async def pump() -> None:
            nonlocal ended
            try:
                async for event in self._generate(request, context):
                    found.append(event)
                    more.set()
            finally:
                ended = True
                more.set()

        task = asyncio.create_task(pump())
        try:
            while True:
                await more.wait()
                more.clear()
                if found:
                    batch = list(found)
                    found.clear()
                    yield inference_pb2.GenerateEvents(events=batch)
                if ended and not found:
                    break
            await task  # an abort (an invalid request) ends the call from here
        finally:
            task.cancel()

    async def _generate(self, request, context):
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
