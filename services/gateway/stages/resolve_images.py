"""``resolve_images``: image resolution without the proxy hop, in process, with the
same code the imageres service runs (``turnpike.image_resolution``)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import ClassVar

from turnpike.conversation.v1 import conversation_pb2
from turnpike.image_resolution import Limits, resolve_image

from gateway.errors import invalid
from gateway.prepared import Prepared
from gateway.stages.base import Resources, Stage


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
    """The prompt tokens of the items' input images, each resolved (decoded, sized)
    off the event loop."""
    images = [image for item in items for image in item.images]
    if not images:
        return 0
    resolved = await asyncio.gather(
        *(asyncio.to_thread(resolve_image, i.url, i.file_id, i.detail, limits) for i in images)
    )
    for index, result in enumerate(resolved):
        if result.error:
            raise invalid(f"Invalid input image {index}: {result.error}.", "input", "invalid_image")
    return sum(r.tokens for r in resolved)
