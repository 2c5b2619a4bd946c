"""Model backends a worker can serve, and which one serves a request.

A backend turns one ``GenerateRequest`` into the event stream of the Inference
contract: (ItemStarted, Delta*, ItemDone)* then exactly one Finished or Error.
Today every model runs on the CPU simulator; a hosted adapter (Cerebras) plugs in
beside it as another ``Backend`` registered for its models.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Protocol

from turnpike.inference.v1 import inference_pb2


class InvalidRequestError(ValueError):
    """The request cannot be served as given. Raised before the first event, so the
    server answers INVALID_ARGUMENT instead of a stream."""


class Backend(Protocol):
    """Implemented by an ``async def generate(self, request)`` that yields events."""

    def generate(
        self, request: inference_pb2.GenerateRequest
    ) -> AsyncIterator[inference_pb2.GenerateEvent]: ...


class Backends:
    """Model id -> backend, with a default for every model not listed."""

    def __init__(self, default: Backend, by_model: Mapping[str, Backend] | None = None) -> None:
        self._default = default
        self._by_model = dict(by_model or {})

    def for_model(self, model: str) -> Backend:
        return self._by_model.get(model, self._default)
