"""Per-RPC duration and outcome of every gRPC service, recorded by a server interceptor
(one place, so every method of every backend is counted the same way)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import grpc
from prometheus_client import Counter, Histogram

from turnpike.grpc_wrapping import AroundCallsInterceptor, status_of
from turnpike.metrics import API_SECONDS

RPC_SECONDS = Histogram(
    "turnpike_grpc_server_handling_seconds",
    "Time a gRPC service spent on one call, from its arrival to its last message.",
    ["grpc_service", "grpc_method"],
    buckets=(*API_SECONDS, 5.0, 10.0, 30.0, 60.0),
)
RPC_HANDLED = Counter(
    "turnpike_grpc_server_handled",
    "gRPC calls finished, by status code (OK, or the error a caller saw).",
    ["grpc_service", "grpc_method", "grpc_code"],
)


class RpcMetricsInterceptor(AroundCallsInterceptor):
    """Times each call of every method and counts it by status code."""

    def __init__(self) -> None:
        super().__init__(_CallTimer.of)


class _CallTimer:
    """Times the calls of one method and counts them by status code."""

    def __init__(self, service: str, method: str) -> None:
        self.service, self.method = service, method
        self.seconds = RPC_SECONDS.labels(service, method)

    @classmethod
    def of(cls, full_method: str) -> _CallTimer:
        service, _, method = full_method.lstrip("/").rpartition("/")
        return cls(service, method)

    @contextmanager
    def call(self, context: grpc.aio.ServicerContext) -> Iterator[None]:
        start = time.perf_counter()
        error: BaseException | None = None
        try:
            yield
        except BaseException as exc:  # GeneratorExit too: a stream its caller left
            error = exc
            raise
        finally:
            self.seconds.observe(time.perf_counter() - start)
            RPC_HANDLED.labels(self.service, self.method, status_of(context, error).name).inc()
