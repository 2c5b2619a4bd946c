"""Model backends a worker can serve, and which one serves a request.

A backend turns one ``GenerateRequest`` into the event stream of the Inference
contract: (ItemStarted, Delta*, ItemDone)* then exactly one Finished or Error.

A request names its backend (``GenerateRequest.backend``, from the router's model
registry): ``"simulator"`` (the CPU simulator) or ``"cerebras"`` (the hosted adapter).
An empty name falls back to the per-model map, then to the default (the simulator),
so callers that predate the field keep working.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from turnpike.inference.v1 import inference_pb2

# Every backend name a request may carry (the router's registry accepts the same).
KNOWN_BACKENDS = ("simulator", "cerebras")


class InvalidRequestError(ValueError):
    """The request cannot be served as given. Raised before the first event, so the
    server answers INVALID_ARGUMENT instead of a stream."""


class Backend(Protocol):
    """Implemented by an ``async def generate(self, request)`` that yields events."""

    def generate(
        self, request: inference_pb2.GenerateRequest
    ) -> AsyncIterator[inference_pb2.GenerateEvent]: ...


class UnavailableBackend:
    """Stands in for a known backend this worker is not configured for: every request
    gets one non-retryable ``backend_unavailable`` Error event (another attempt on the
    same worker cannot succeed)."""

    def __init__(self, message: str) -> None:
        self.message = message

    async def generate(
        self, request: inference_pb2.GenerateRequest
    ) -> AsyncIterator[inference_pb2.GenerateEvent]:
        yield error_event("backend_unavailable", self.message, retryable=False)


def error_event(code: str, message: str, *, retryable: bool) -> inference_pb2.GenerateEvent:
    """A stream's terminal error event (every backend, and the server around them)."""
    return inference_pb2.GenerateEvent(
        error=inference_pb2.Error(code=code, message=message, retryable=retryable)
    )


class Backends:
    """Backend name -> backend, plus model id -> backend for requests without a name,
    with a default for everything else."""

    def __init__(
        self,
        default: Backend,
        by_model: Mapping[str, Backend] | None = None,
        by_name: Mapping[str, Backend] | None = None,
    ) -> None:
        self._default = default
        self._by_model = dict(by_model or {})
        self._by_name = dict(by_name or {})

    def for_model(self, model: str) -> Backend:
        return self._by_model.get(model, self._default)

    def for_request(self, request: inference_pb2.GenerateRequest) -> Backend:
        """The backend named by the request; raises ``InvalidRequestError`` for a name
        that is not a backend at all."""
        name = request.backend
        if not name:
            return self.for_model(request.model)
        if name in self._by_name:
            return self._by_name[name]
        if name == "simulator":
            return self._default
        if name in KNOWN_BACKENDS:
            return UnavailableBackend(f"The {name} backend is not available on this worker.")
        raise InvalidRequestError(
            f"unknown backend {name!r}; expected one of: {', '.join(KNOWN_BACKENDS)}"
        )
