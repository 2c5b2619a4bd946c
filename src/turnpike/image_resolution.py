"""Image resolution: decode an input image, measure it, pick its detail and price it in tokens.

Pure and synchronous (Pillow decoding is CPU work; the service runs it in a thread). Problems
with one image are reported in that image's ``error``, never raised, so one bad image does
not fail a whole request.

Resolution is two steps, so that a request's images can be bounded together before any is
decoded (``turnpike.image_budget``): ``probe_image`` reads the image's size from its header
(cheap: no pixel is decoded), ``decode_probed`` decodes it to prove it is an image.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import math
import re
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction

from PIL import Image, UnidentifiedImageError

# Pillow format name -> MIME type, for the formats the Responses API accepts.
SUPPORTED_FORMATS = {
    "PNG": "image/png",
    "JPEG": "image/jpeg",
    "GIF": "image/gif",
    "WEBP": "image/webp",
}

# OpenAI's published vision pricing for GPT-4o-class models.
LOW_DETAIL_TOKENS = 85
BASE_TOKENS = 85
TILE_TOKENS = 170
TILE_SIZE = 512
FIT_BOX = 2048
SHORT_SIDE = 768
# "auto" picks low detail when the image would fit in a single tile anyway.
AUTO_LOW_MAX_SIDE = 512

DETAILS = ("low", "high", "auto")

_WHITESPACE = re.compile(rb"\s+")


@dataclass(frozen=True)
class Resolution:
    mime_type: str = ""
    width: int = 0
    height: int = 0
    detail: str = ""  # resolved: low | high
    tokens: int = 0
    sha256: str = ""  # "sha256:<hex>" of the decoded bytes
    error: str = ""
    error_kind: str = ""  # one of ERROR_KINDS when there is an error


@dataclass(frozen=True)
class Limits:
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 8192 * 8192
    # All the images one request resolves, together (``turnpike.image_budget``).
    max_request_pixels: int = 8192 * 8192


@dataclass(frozen=True)
class Probe:
    """An image whose header was read (``probe_image``), not yet decoded."""

    data: bytes
    mime_type: str
    width: int
    height: int
    detail: str  # resolved: low | high

    @property
    def pixels(self) -> int:
        return self.width * self.height


# What went wrong with an image, in a word (``Resolution.error_kind``): few and fixed, so
# they can label metrics.
INVALID = "invalid"  # the request is malformed: bad detail, data URL or base64, no source
UNSUPPORTED_SOURCE = "unsupported_source"  # a remote URL, another scheme, a file id
TOO_LARGE = "too_large"  # over the byte or pixel limit
UNSUPPORTED_FORMAT = "unsupported_format"  # an image, not png, jpeg, gif or webp
CORRUPT = "corrupt"  # not an image, or data that does not decode
ERROR_KINDS = (INVALID, UNSUPPORTED_SOURCE, TOO_LARGE, UNSUPPORTED_FORMAT, CORRUPT)


class ImageError(ValueError):
    """A problem with one image; its message goes into that image's ``error``, its kind
    (one of ``ERROR_KINDS``) into ``error_kind``."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def high_detail_tokens(width: int, height: int) -> int:
    """Scale to fit in 2048x2048, then the shortest side to 768 (both only ever shrink),
    count 512px tiles: 85 + 170 per tile. Exact rational arithmetic, so tile counts at
    boundaries do not depend on float rounding."""
    if width <= 0 or height <= 0:
        raise ValueError("image dimensions must be positive")
    w, h = Fraction(width), Fraction(height)
    longest = max(w, h)
    if longest > FIT_BOX:
        w, h = w * FIT_BOX / longest, h * FIT_BOX / longest
    shortest = min(w, h)
    if shortest > SHORT_SIDE:
        w, h = w * SHORT_SIDE / shortest, h * SHORT_SIDE / shortest
    tiles = math.ceil(w / TILE_SIZE) * math.ceil(h / TILE_SIZE)
    return BASE_TOKENS + TILE_TOKENS * tiles


def resolve_detail(detail: str, width: int, height: int) -> str:
    """The detail actually used: "low" or "high". Empty means "auto"."""
    detail = detail or "auto"
    if detail not in DETAILS:
        raise ImageError(f"invalid detail {detail!r}: expected one of low, high, auto", INVALID)
    if detail == "auto":
        return "low" if width <= AUTO_LOW_MAX_SIDE and height <= AUTO_LOW_MAX_SIDE else "high"
    return detail


def image_tokens(width: int, height: int, detail: str) -> int:
    """Token cost for a resolved detail ("low" or "high")."""
    if detail == "low":
        return LOW_DETAIL_TOKENS
    if detail == "high":
        return high_detail_tokens(width, height)
    raise ValueError(f"detail must be resolved to low or high, got {detail!r}")


def decode_data_url(url: str, max_bytes: int) -> bytes:
    """The bytes of a ``data:`` URL (base64 or percent-encoded), bounded by ``max_bytes``."""
    header, sep, payload = url.partition(",")
    if not sep:
        raise ImageError("malformed data URL: missing ','", INVALID)
    params = header[len("data:") :].split(";")
    if params[-1].strip().lower() == "base64":
        raw = _WHITESPACE.sub(b"", payload.encode("ascii", errors="replace"))
        # Refuse before decoding: the base64 text already tells the decoded size.
        if len(raw) // 4 * 3 > max_bytes + 2:
            raise ImageError(f"image is too large (limit {max_bytes} bytes)", TOO_LARGE)
        try:
            data = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ImageError(f"invalid base64 in data URL: {exc}", INVALID) from None
    else:
        data = urllib.parse.unquote_to_bytes(payload)
    if len(data) > max_bytes:
        raise ImageError(f"image is too large ({len(data)} bytes, limit {max_bytes})", TOO_LARGE)
    if not data:
        raise ImageError("data URL is empty", INVALID)
    return data


def read_header(data: bytes, max_pixels: int) -> tuple[str, int, int]:
    """The image's (mime, width, height) from its header, checked against the format
    and pixel limits; no pixel is decoded."""
    with _pillow_errors(max_pixels), Image.open(io.BytesIO(data)) as img:
        return _checked_header(img, max_pixels)


def decode_image(data: bytes, max_pixels: int) -> None:
    """Decode the image fully (the first frame) to prove it is one."""
    with _pillow_errors(max_pixels), Image.open(io.BytesIO(data)) as img:
        _, width, height = _checked_header(img, max_pixels)
        if img.format == "JPEG":
            # JPEG can decode at 1/8 scale: the whole stream is still parsed (so
            # corruption and truncation are caught) at a fraction of the memory.
            img.draft(img.mode, (max(1, width // 8), max(1, height // 8)))
        img.load()


def _checked_header(img: Image.Image, max_pixels: int) -> tuple[str, int, int]:
    mime = SUPPORTED_FORMATS.get(img.format or "")
    if mime is None:
        raise ImageError(
            f"unsupported image format {img.format}: expected png, jpeg, gif or webp",
            UNSUPPORTED_FORMAT,
        )
    width, height = img.size
    if width <= 0 or height <= 0:
        raise ImageError("image has no pixels", CORRUPT)
    if width * height > max_pixels:
        raise ImageError(
            f"image is too large ({width}x{height} pixels, limit {max_pixels} pixels)",
            TOO_LARGE,
        )
    return mime, width, height


@contextmanager
def _pillow_errors(max_pixels: int) -> Iterator[None]:
    """Pillow's exceptions as ``ImageError``s."""
    try:
        yield
    except ImageError:
        raise
    except Image.DecompressionBombError:
        raise ImageError(f"image is too large (limit {max_pixels} pixels)", TOO_LARGE) from None
    except UnidentifiedImageError:
        raise ImageError("data is not a recognised image", CORRUPT) from None
    except Exception as exc:
        # Pillow's decoders report corrupt or truncated data with many exception types
        # (OSError, SyntaxError, ValueError, struct.error...); all mean "not a valid image".
        raise ImageError(f"image data is corrupt: {exc}", CORRUPT) from None


def resolve_image(url: str, file_id: str, detail: str, limits: Limits) -> Resolution:
    """Resolve one input image. Never raises for bad input: see ``Resolution.error``."""
    probed = probe_image(url, file_id, detail, limits)
    return probed if isinstance(probed, Resolution) else decode_probed(probed, limits)


def probe_image(url: str, file_id: str, detail: str, limits: Limits) -> Probe | Resolution:
    """The image's bytes, size and detail, from its header alone; or, when something is
    wrong with it already, its ``Resolution`` with the error."""
    try:
        return _probe(url, file_id, detail, limits)
    except ImageError as exc:
        return Resolution(error=str(exc), error_kind=exc.kind)


def decode_probed(probe: Probe, limits: Limits) -> Resolution:
    """Decode a probed image: its ``Resolution``, an error if it does not decode."""
    try:
        decode_image(probe.data, limits.max_image_pixels)
    except ImageError as exc:
        return Resolution(error=str(exc), error_kind=exc.kind)
    return Resolution(
        mime_type=probe.mime_type,
        width=probe.width,
        height=probe.height,
        detail=probe.detail,
        tokens=image_tokens(probe.width, probe.height, probe.detail),
        sha256="sha256:" + hashlib.sha256(probe.data).hexdigest(),
    )


def _probe(url: str, file_id: str, detail: str, limits: Limits) -> Probe:
    if detail and detail not in DETAILS:
        raise ImageError(f"invalid detail {detail!r}: expected one of low, high, auto", INVALID)
    if not url:
        if file_id:
            # There is no file store yet, so every file id is unknown.
            raise ImageError(f"file '{file_id}' not found", UNSUPPORTED_SOURCE)
        raise ImageError("image has neither url nor file_id", INVALID)
    scheme = url.split(":", 1)[0].strip().lower() if ":" in url else ""
    if scheme in ("http", "https"):
        # Fetching arbitrary URLs from inside the cluster is a server-side request forgery
        # risk and an unbounded latency source; clients must inline images.
        raise ImageError("remote image URLs are not fetched", UNSUPPORTED_SOURCE)
    if scheme != "data":
        raise ImageError("image url must be a data: URL", UNSUPPORTED_SOURCE)
    data = decode_data_url(url, limits.max_image_bytes)
    mime, width, height = read_header(data, limits.max_image_pixels)
    return Probe(data, mime, width, height, resolve_detail(detail, width, height))
