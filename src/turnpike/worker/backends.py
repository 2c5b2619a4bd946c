"""Model backends a worker can serve, and which one serves a request.

A backend turns one ``GenerateRequest`` into the event stream of the Inference
contract: (ItemStarted, Delta*, ItemDone)* then exactly one Finished or Error.

A request names its backend (``GenerateRequest.backend``, from the router's model
registry; the gateway always sets it). An empty name is the simulator: it is the
field's default, and the simulator is the one backend every worker has, so a caller
that builds its own requests (a benchmark, a test) need not name it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Protocol

from turnpike.backend_names import BACKEND_NAMES, SIMULATOR
from turnpike.inference.v1 import inference_pb2


class InvalidRequestError(ValueError):
    """The request cannot be served as given. Raised before the first event, so the
    server answers INVALID_ARGUMENT instead of a stream."""


class Backend(Protocol):
    """Implemented by an ``async def generate(self, request)`` that yields events."""

    def generate(
        self, request: inference_pb2.GenerateRequest
    ) -> AsyncGenerator[inference_pb2.GenerateEvent, None]: ...


class UnavailableBackend:
    """Stands in for a known backend this worker is not configured for: every request
    gets one non-retryable ``backend_unavailable`` Error event (another attempt on the
    same worker cannot succeed)."""

    def __init__(self, message: str) -> None:
        self.message = message

    async def generate(
        self, request: inference_pb2.GenerateRequest
    ) -> AsyncGenerator[inference_pb2.GenerateEvent, None]:
        yield error_event("backend_unavailable", self.message, retryable=False)


def error_event(code: str, message: str, *, retryable: bool) -> inference_pb2.GenerateEvent:
    """A stream's terminal error event (every backend, and the server around them)."""
    return inference_pb2.GenerateEvent(
        error=inference_pb2.Error(code=code, message=message, retryable=retryable)
    )


class Backends:
    """Backend name -> backend; the simulator must be among them."""

    def __init__(self, by_name: Mapping[str, Backend]) -> None:
        if SIMULATOR not in by_name:
            raise ValueError("every worker serves the simulator backend")
        self._by_name = dict(by_name)

    @staticmethod
    def name_for(request: inference_pb2.GenerateRequest) -> str:
        """The backend name the request asks for (empty: the simulator)."""
        return request.backend or SIMULATOR

    def for_request(self, request: inference_pb2.GenerateRequest) -> Backend:
        """The backend named by the request; raises ``InvalidRequestError`` for a name
        that is not a backend at all."""
        name = self.name_for(request)
        backend = self._by_name.get(name)
        if backend is not None:
            return backend
        if name in BACKEND_NAMES:
            return UnavailableBackend(f"The {name} backend is not available on this worker.")
        raise InvalidRequestError(
            f"unknown backend {name!r}; expected one of: {', '.join(BACKEND_NAMES)}"
        )
