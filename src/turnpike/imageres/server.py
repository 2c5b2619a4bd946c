"""gRPC adapter: Resolve, and the legacy ProxyGenerate hop."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import aclosing

import grpc

from turnpike.conversation.v1 import conversation_pb2
from turnpike.image_budget import ImagesTooLarge, resolve_images
from turnpike.image_resolution import Limits, Resolution
from turnpike.imageres import metrics
from turnpike.imageres.proxy import WorkerChannels, error_event, is_worker_address, relay_generate
from turnpike.imageres.v1 import imageres_pb2, imageres_pb2_grpc
from turnpike.inference.v1 import inference_pb2

log = logging.getLogger(__name__)


def resolution_to_pb(res: Resolution) -> imageres_pb2.ResolvedImage:
    return imageres_pb2.ResolvedImage(
        mime_type=res.mime_type,
        width=res.width,
        height=res.height,
        detail=res.detail,
        tokens=res.tokens,
        sha256=res.sha256,
        error=res.error,
    )


class ImageResolverServicer(imageres_pb2_grpc.ImageResolverServicer):
    def __init__(self, limits: Limits, channels: WorkerChannels) -> None:
        self._limits = limits
        self._channels = channels

    async def _resolve_all(self, images: Iterable[conversation_pb2.Image]) -> list[Resolution]:
        # Bounded together, then decoded one at a time (turnpike.image_budget): decoding
        # them all at once took memory in proportion to the request's pixels.
        resolved = await resolve_images(list(images), self._limits)
        metrics.count(resolved)
        return resolved

    async def Resolve(
        self, request: imageres_pb2.ResolveRequest, context: grpc.aio.ServicerContext
    ) -> imageres_pb2.ResolveResponse:
        try:
            resolved = await self._resolve_all(request.images)
        except ImagesTooLarge as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return imageres_pb2.ResolveResponse(
            images=[resolution_to_pb(r) for r in resolved],
            total_tokens=sum(r.tokens for r in resolved),
        )

    async def ProxyGenerate(
        self, request: imageres_pb2.ProxyGenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[inference_pb2.GenerateEvent]:
        if not request.worker_address:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "worker_address is required")
        if not is_worker_address(request.worker_address):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "worker_address must be host:port"
            )
        if not request.HasField("request"):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "request is required")
        generate = request.request
        images = [image for item in generate.items for image in item.images]
        try:
            resolved = await self._resolve_all(images)
        except ImagesTooLarge as exc:
            # As the direct path refuses it (400 images_too_large), before any decoding.
            yield error_event("images_too_large", str(exc), False)
            return
        for index, res in enumerate(resolved):
            if res.error:
                # The worker cannot use an image we could not read: fail the generation the
                # way the direct path would, without spending a worker slot on it.
                yield error_event("invalid_image", f"image {index}: {res.error}", False)
                return
        # The worker charges the images as prompt tokens.
        generate.image_tokens = sum(res.tokens for res in resolved)
        stub = self._channels.stub(request.worker_address)
        events = relay_generate(
            stub, request.worker_address, generate, time_limit_s=context.time_remaining()
        )
        # aclosing: if the caller cancels while we wait on it, the relay (and with it the
        # upstream call) is closed right away, not whenever the generator is collected.
        async with aclosing(events):
            async for event in events:
                yield event
