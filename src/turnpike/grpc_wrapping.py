"""Server interceptors that run each call of a method inside a context manager of their own
(a timer, a span), with the method's wrapped handler made on its first call and kept: a
call costs a dictionary lookup, not a new handler (grpcio asks the interceptors on every
call)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol

import grpc


class AroundCall(Protocol):
    """What runs around every call of one method."""

    def call(self, context: grpc.aio.ServicerContext) -> AbstractContextManager[None]: ...


def status_of(context: grpc.aio.ServicerContext, error: BaseException | None) -> grpc.StatusCode:
    """The status the caller saw: the code the servicer set or aborted with, else what the
    error (if any) becomes."""
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    if error is None:
        return grpc.StatusCode.OK
    if isinstance(error, (GeneratorExit, asyncio.CancelledError)):
        return grpc.StatusCode.CANCELLED  # the caller went away
    return grpc.StatusCode.UNKNOWN


class WrappingInterceptor(grpc.aio.ServerInterceptor):
    """Serves each method by ``wrap(method, handler)``, made on the method's first call."""

    def __init__(self, wrap: Callable[[str, grpc.RpcMethodHandler], grpc.RpcMethodHandler]) -> None:
        self._wrap = wrap
        # method -> (the handler it wraps, the wrapped one)
        self._wrapped: dict[str, tuple[grpc.RpcMethodHandler, grpc.RpcMethodHandler]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        method = handler_call_details.method
        known = self._wrapped.get(method)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = (handler, wrapped)
        return wrapped


class AroundCallsInterceptor(WrappingInterceptor):
    """Runs each call of a method in what ``around(method)`` returns (None: left alone)."""

    def __init__(self, around: Callable[[str], AroundCall | None]) -> None:
        def wrap_method(method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
            per_call = around(method)
            return handler if per_call is None else wrap(handler, per_call)

        super().__init__(wrap_method)


def wrap(handler: grpc.RpcMethodHandler, around: AroundCall) -> grpc.RpcMethodHandler:
    if handler.response_streaming:
        return replace(handler, _around_stream(_behavior(handler), around))
    return replace(handler, _around_unary(_behavior(handler), around))


def _behavior(handler: grpc.RpcMethodHandler) -> Callable[..., Any]:
    if handler.request_streaming:
        return handler.stream_stream if handler.response_streaming else handler.stream_unary
    return handler.unary_stream if handler.response_streaming else handler.unary_unary


def _around_unary(inner: Callable[..., Any], around: AroundCall) -> Callable[..., Any]:
    async def behavior(request: Any, context: grpc.aio.ServicerContext) -> Any:
        with around.call(context):
            result = inner(request, context)
            return await result if inspect.isawaitable(result) else result

    return behavior


def _around_stream(inner: Callable[..., Any], around: AroundCall) -> Callable[..., Any]:
    async def behavior(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        with around.call(context):
            async for message in messages_of(inner(request, context)):
                yield message

    return behavior


def messages_of(result: Any) -> AsyncIterator[Any]:
    """What a streaming behaviour sends: its own iterator when it yields messages (no layer
    between it and the caller, as this runs per message), none when it wrote them with
    ``context.write`` (a coroutine that returns nothing)."""
    return _written(result) if inspect.isawaitable(result) else result


async def _written(result: Awaitable[None]) -> AsyncIterator[Any]:
    await result
    return
    yield  # an async generator that yields nothing


def replace(
    handler: grpc.RpcMethodHandler,
    behavior: Callable[..., Any],
    request_deserializer: Callable[[bytes], Any] | None = None,
) -> grpc.RpcMethodHandler:
    """``handler`` of the same kind with another behaviour (and deserializer, if given)."""
    make = {
        (False, False): grpc.unary_unary_rpc_method_handler,
        (False, True): grpc.unary_stream_rpc_method_handler,
        (True, False): grpc.stream_unary_rpc_method_handler,
        (True, True): grpc.stream_stream_rpc_method_handler,
    }[(handler.request_streaming, handler.response_streaming)]
    return make(
        behavior,
        request_deserializer=request_deserializer or handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
