"""The sprint's in-process cache of model configurations, per gateway process: a miss
only costs the router call it would have saved, never a wrong answer."""

from __future__ import annotations

import time

from turnpike.gateway.metrics import CacheLookups
from turnpike.router.v1 import router_pb2

LOOKUPS = CacheLookups("model")


class ModelConfigCache:
    """Model name -> configuration, refreshed from the router after ``ttl_s``."""

    def __init__(self, ttl_s: float) -> None:
        self._ttl = ttl_s
        self._entries: dict[str, tuple[float, router_pb2.ModelConfig]] = {}

    def get(self, name: str) -> router_pb2.ModelConfig | None:
        entry = self._entries.get(name)
        model = None if entry is None or time.monotonic() - entry[0] > self._ttl else entry[1]
        LOOKUPS.count(model)
        return model

    def put(self, name: str, model: router_pb2.ModelConfig) -> None:
        self._entries[name] = (time.monotonic(), model)
