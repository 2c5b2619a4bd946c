"""The images of one request, bounded together, then decoded within a bound.

A decode costs memory in proportion to the pixels an image declares in its header (an
8192x8192 PNG of 215 KB decodes to 256 MiB), so every image of a request is probed first
(``turnpike.image_resolution.probe_image``: its size from its header, nothing decoded),
and the request is refused (``ImagesTooLarge``) when their pixels add up to more than
``Limits.max_request_pixels``. Only then are they decoded, each holding its pixels from
the process's ``DecodeAllowance`` while it decodes: a process holds at most one largest
image's worth of decoded pixels (``Limits.max_image_pixels``) at once, however many
requests and images arrive together. The gateway and the imageres service both run this.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from turnpike.image_resolution import (
    Limits,
    Probe,
    Resolution,
    decode_probed,
    probe_image,
)

T = TypeVar("T")


class ImageRef(Protocol):
    """An input image as the protos carry it (``conversation_pb2.Image``)."""

    url: str
    file_id: str
    detail: str


class ImagesTooLarge(ValueError):
    """A request's images declare more pixels than ``Limits.max_request_pixels``."""

    def __init__(self, pixels: int, images: int, limit: int) -> None:
        super().__init__(
            f"The input images of this request hold {pixels:,} pixels in all ({images} "
            f"images), more than the limit of {limit:,} pixels per request (an earlier "
            "turn's images count when they are resolved again); send fewer or smaller images."
        )
        self.pixels, self.images, self.limit = pixels, images, limit


def probe_images(images: Sequence[ImageRef], limits: Limits) -> list[Probe | Resolution]:
    """Each image probed (``probe_image``): a ``Probe``, or its error as a ``Resolution``."""
    return [probe_image(i.url, i.file_id, i.detail, limits) for i in images]


def check_budget(probed: Sequence[Probe | Resolution], limits: Limits) -> None:
    """``ImagesTooLarge`` when the probed images' pixels add up to more than the limit."""
    sizes = [p.pixels for p in probed if isinstance(p, Probe)]
    if sum(sizes) > limits.max_request_pixels:
        raise ImagesTooLarge(sum(sizes), len(sizes), limits.max_request_pixels)


async def decode(probe: Probe, limits: Limits) -> Resolution:
    """Decode one probed image in a thread, holding its pixels from the allowance."""
    allowance = decode_allowance(limits.max_image_pixels)
    return await allowance.run(probe.pixels, decode_probed, probe, limits)


async def resolve_images(images: Sequence[ImageRef], limits: Limits) -> list[Resolution]:
    """Every image resolved, one at a time, errors in their ``Resolution``; the whole
    request refused with ``ImagesTooLarge`` before any decoding when over the budget."""
    probed = await asyncio.to_thread(probe_images, images, limits)
    check_budget(probed, limits)
    return [p if isinstance(p, Resolution) else await decode(p, limits) for p in probed]


class DecodeAllowance:
    """Pixels a process may hold decoded at once, lent first come, first served: a
    decode waits until its pixels are free and every earlier one has started, so small
    images cannot starve a large one. An image larger than the whole allowance (none
    gets past the per-image limit it is sized to) waits for all of it."""

    def __init__(self, pixels: int) -> None:
        self.pixels = pixels
        self.free = pixels
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def run(self, pixels: int, work: Callable[..., T], *args: object) -> T:
        """``work(*args)`` in a thread, once ``pixels`` are free; they are given back when
        the thread ends, not before, even if the caller is cancelled meanwhile."""
        pixels = min(pixels, self.pixels)
        await self._acquire(pixels)
        try:
            done = asyncio.get_running_loop().run_in_executor(None, work, *args)
        except BaseException:
            self._release(pixels)
            raise
        done.add_done_callback(lambda _: self._release(pixels))
        # Shielded: a cancelled caller stops waiting, the thread cannot be stopped.
        return await asyncio.shield(done)

    async def _acquire(self, pixels: int) -> None:
        if not self._waiting and self.free >= pixels:
            self.free -= pixels
            return
        granted = asyncio.get_running_loop().create_future()
        entry = (pixels, granted)
        self._waiting.append(entry)
        try:
            await granted
        except BaseException:
            if granted.done() and not granted.cancelled():
                self._release(pixels)  # granted as the caller was cancelled
            else:
                granted.cancel()
                if entry in self._waiting:
                    self._waiting.remove(entry)
                self._grant()  # the ones behind it may fit now
            raise

    def _release(self, pixels: int) -> None:
        self.free += pixels
        self._grant()

    def _grant(self) -> None:
        while self._waiting:
            pixels, granted = self._waiting[0]
            if granted.cancelled():  # its caller is leaving; nothing to give it
                self._waiting.popleft()
                continue
            if pixels > self.free:
                return
            self._waiting.popleft()
            self.free -= pixels
            granted.set_result(None)


@functools.cache
def decode_allowance(pixels: int) -> DecodeAllowance:
    """The process's allowance: one largest image's pixels (the per-image limit), which
    is what the containers' memory limits provide for (compose.yaml)."""
    return DecodeAllowance(pixels)
