"""Per-RPC duration and outcome of every gRPC service, recorded by a server interceptor
(one place, so every method of every backend is counted the same way). A method's timed
handler is made on its first call and kept: a call costs a lookup, not a new handler."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
from prometheus_client import Counter, Histogram

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


def _code_of(context: grpc.aio.ServicerContext, error: BaseException | None) -> str:
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code.name
    if error is None:
        return "OK"
    if isinstance(error, (GeneratorExit, asyncio.CancelledError)):
        return "CANCELLED"  # the caller went away
    return "UNKNOWN"


class RpcMetricsInterceptor(grpc.aio.ServerInterceptor):
    """Wraps each method's handler to time it and count its status code."""

    def __init__(self) -> None:
        # method -> (the handler it wraps, the timed one): built on a method's first call.
        self._timed: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        known = self._timed.get(handler_call_details.method)
        if known is not None and known[0] is handler:
            return known[1]
        service, _, method = handler_call_details.method.lstrip("/").rpartition("/")
        timer = _CallTimer(service, method)
        if handler.response_streaming:
            timed = _replace(handler, _timed_stream(_behavior(handler), timer))
        else:
            timed = _replace(handler, _timed_unary(_behavior(handler), timer))
        self._timed[handler_call_details.method] = (handler, timed)
        return timed


class _CallTimer:
    """Times the calls of one method and counts them by status code."""

    def __init__(self, service: str, method: str) -> None:
        self.service, self.method = service, method
        self.seconds = RPC_SECONDS.labels(service, method)

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
            RPC_HANDLED.labels(self.service, self.method, _code_of(context, error)).inc()


def _behavior(handler: grpc.RpcMethodHandler) -> Callable[..., Any]:
    if handler.request_streaming:
        return handler.stream_stream if handler.response_streaming else handler.stream_unary
    return handler.unary_stream if handler.response_streaming else handler.unary_unary


def _timed_unary(inner: Callable[..., Any], timer: _CallTimer) -> Callable[..., Any]:
    async def behavior(request: Any, context: grpc.aio.ServicerContext) -> Any:
        with timer.call(context):
            result = inner(request, context)
            return await result if inspect.isawaitable(result) else result

    return behavior


def _timed_stream(inner: Callable[..., Any], timer: _CallTimer) -> Callable[..., Any]:
    async def behavior(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        with timer.call(context):
            result = inner(request, context)
            if inspect.isawaitable(result):  # writes with context.write, returns nothing
                await result
                return
            async for message in result:
                yield message

    return behavior


def _replace(handler: grpc.RpcMethodHandler, behavior: Callable[..., Any]) -> grpc.RpcMethodHandler:
    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return make(
        behavior,
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
