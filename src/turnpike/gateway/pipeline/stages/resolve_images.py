"""``resolve_images``: image resolution without the proxy hop, in process, with the
same code the imageres service runs (``turnpike.image_resolution``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import ClassVar

from turnpike.conversation.v1 import conversation_pb2
from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.pipeline.stages.base import Resources, Stage
from turnpike.gateway.protocol.errors import ApiError, invalid
from turnpike.image_budget import ImagesTooLarge, check_budget, decode, probe_images
from turnpike.image_resolution import Limits, Probe, Resolution


@dataclass(frozen=True)
class ResolveImages(Stage):
    name: ClassVar[str] = "resolve_images"
    inputs: ClassVar[frozenset[str]] = frozenset({"parent", "conversation"})
    output: ClassVar[str] = "image_tokens"
    # Continuing from the connection cache, resolve only the new items' images.
    reuse: bool = False

    async def run(self, p: Prepared, res: Resources) -> int:
        conversation, parent = p.conversation, p.parent
        assert conversation is not None
        if self.reuse and parent is not None and parent.from_connection_cache:
            new = await image_tokens(conversation.new_items, res.image_limits)
            return parent.state.image_tokens + new
        return await image_tokens(conversation.items, res.image_limits)


async def image_tokens(items: list[conversation_pb2.Item], limits: Limits) -> int:
    """The prompt tokens of the items' input images, off the event loop: all probed from
    their headers and bounded together (``turnpike.image_budget``), then decoded one at
    a time. The first image in error, or a request over the budget, is a 400."""
    images = [image for item in items for image in item.images]
    if not images:
        return 0
    probed = await asyncio.to_thread(probe_images, images, limits)
    # Errors the headers show first: they cost nothing more to find.
    for index, result in enumerate(probed):
        if isinstance(result, Resolution):
            raise _invalid_image(index, result)
    try:
        check_budget(probed, limits)
    except ImagesTooLarge as exc:
        raise invalid(str(exc), "input", "images_too_large") from None
    tokens = 0
    for index, probe in enumerate(probed):
        assert isinstance(probe, Probe)
        resolved = await decode(probe, limits)
        if resolved.error:
            raise _invalid_image(index, resolved)
        tokens += resolved.tokens
    return tokens


def _invalid_image(index: int, result: Resolution) -> ApiError:
    return invalid(f"Invalid input image {index}: {result.error}.", "input", "invalid_image")
