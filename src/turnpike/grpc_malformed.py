"""A request message that does not parse is the caller's error: INVALID_ARGUMENT.

grpcio deserializes before any servicer runs, and answers a message it cannot parse
with INTERNAL (unary) or UNKNOWN with a logged traceback (streaming replies). This
interceptor wraps each method's deserializer so a ``DecodeError`` becomes a marker, and
its behaviour so the marker aborts with INVALID_ARGUMENT (on a session stream, the
stream ends so: the gateway asks by calls). It must be the innermost interceptor: the
others keep the deserializer it installs. A method's wrapped handler is made once.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from turnpike.grpc_wrapping import WrappingInterceptor, messages_of, replace


@dataclass(frozen=True)
class _Malformed:
    reason: str


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except DecodeError as err:
            return _Malformed(str(err))

    return deserialize


async def _refuse(request: _Malformed, context: grpc.aio.ServicerContext) -> None:
    await context.abort(
        grpc.StatusCode.INVALID_ARGUMENT, f"The request message does not parse: {request.reason}"
    )


def _unary(inner: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    async def behavior(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, _Malformed):
            await _refuse(request, context)
        result = inner(request, context)
        return await result if inspect.isawaitable(result) else result

    return behavior


def _requests_streaming(inner: Callable[..., Any]) -> Callable[..., AsyncIterator[Any]]:
    async def behavior(
        requests: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        async def checked() -> AsyncIterator[Any]:
            async for request in requests:
                if isinstance(request, _Malformed):
                    await _refuse(request, context)
                yield request

        async for message in inner(checked(), context):
            yield message

    return behavior


def _streaming(inner: Callable[..., Any]) -> Callable[..., AsyncIterator[Any]]:
    async def behavior(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        if isinstance(request, _Malformed):
            await _refuse(request, context)
        async for message in messages_of(inner(request, context)):
            yield message

    return behavior


class MalformedRequestInterceptor(WrappingInterceptor):
    def __init__(self) -> None:
        super().__init__(lambda method, handler: _wrap(handler))


def _wrap(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    deserializer = _tolerant(handler.request_deserializer)
    if handler.request_streaming:
        if not handler.response_streaming:
            return handler  # no service of ours takes a stream and answers once
        return replace(handler, _requests_streaming(handler.stream_stream), deserializer)
    if handler.response_streaming:
        return replace(handler, _streaming(handler.unary_stream), deserializer)
    return replace(handler, _unary(handler.unary_unary), deserializer)
