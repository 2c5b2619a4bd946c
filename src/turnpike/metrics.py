"""Prometheus metrics, shared by every service: the registry a process records into, the
``/metrics`` listener on a port of its own, and the buckets the services agree on.

Metrics are recorded with prometheus-client into its default registry. A process serves
them with ``serve`` (a small HTTP server on a thread of its own, so a scrape never waits
behind the event loop). Gateway processes that share a port (``TURNPIKE_GATEWAY_PROCESSES``)
record through prometheus-client's multiprocess mode instead: each writes its samples to
files in ``PROMETHEUS_MULTIPROC_DIR`` and the parent process serves their sum
(``multiprocess_registry``).

Names: Turnpike's own live under ``turnpike_``; the OpenTelemetry GenAI semantic
conventions' metrics keep their names (dots become underscores, as every OTel-to-Prometheus
bridge writes them): ``gen_ai_server_time_to_first_token_seconds``,
``gen_ai_server_request_duration_seconds``, ``gen_ai_client_token_usage``.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client import multiprocess as prometheus_multiprocess

log = logging.getLogger(__name__)

# A ``_created`` series per counter and histogram doubles what a scrape carries, for a
# timestamp Prometheus does not need (it sees resets by itself).
disable_created_metrics()

MULTIPROC_DIR_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"

# Time an API service adds: sub-millisecond to a second.
API_SECONDS = (
    0.0005,
    0.001,
    0.002,
    0.003,
    0.005,
    0.0075,
    0.01,
    0.015,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
)
# Time a whole turn or a first token takes, model included (the GenAI conventions'
# advice for gen_ai.server.time_to_first_token, stretched to a minute).
TURN_SECONDS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    30.0,
    60.0,
)
# Token counts per request (the GenAI conventions' buckets for gen_ai.client.token.usage).
TOKEN_COUNTS = tuple(float(4**power) for power in range(14))


def multiprocess_enabled() -> bool:
    return bool(os.environ.get(MULTIPROC_DIR_VARIABLE))


def registry() -> CollectorRegistry:
    """What this process's metrics are read from: its own registry, or, in multiprocess
    mode, the sum over every process writing into the shared folder."""
    if multiprocess_enabled():
        return multiprocess_registry()
    return REGISTRY


def multiprocess_registry() -> CollectorRegistry:
    collected = CollectorRegistry()
    prometheus_multiprocess.MultiProcessCollector(collected)
    return collected


@dataclass(frozen=True)
class MetricsEndpoint:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"


def serve(endpoint: MetricsEndpoint, source: CollectorRegistry | None = None) -> Any:
    """Serve /metrics on ``endpoint`` from a thread of its own; returns the server
    (``shutdown()`` stops it)."""
    server, _thread = start_http_server(
        endpoint.port, addr=endpoint.host, registry=source or registry()
    )
    log.info("metrics on %s", endpoint.url)
    return server
