"""Image resolution without gRPC: the token formula, detail choice, decoding and errors."""

from __future__ import annotations

import base64
import hashlib
import io
from urllib.parse import quote_from_bytes

import pytest
from PIL import Image

from turnpike.image_resolution import (
    CORRUPT,
    INVALID,
    TOO_LARGE,
    UNSUPPORTED_FORMAT,
    UNSUPPORTED_SOURCE,
    Limits,
    high_detail_tokens,
    image_tokens,
    resolve_detail,
    resolve_image,
)


def encode(width: int, height: int, fmt: str = "PNG", mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, (width, height), "red" if mode == "RGB" else 1).save(buf, fmt)
    return buf.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


LIMITS = Limits()


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [
        (1024, 1024, 765),  # -> 768x768, 4 tiles
        (2048, 4096, 1105),  # -> 1024x2048 -> 768x1536, 6 tiles
        (4096, 8192, 1105),  # same aspect ratio, same cost
        (512, 512, 255),  # one tile, never upscaled
        (100, 100, 255),
        (513, 512, 425),  # just over one tile
        (768, 768, 765),
        (2048, 2048, 765),
        (1000, 3000, 1445),  # -> 682.67x2048: 2 x 4 tiles
        (4000, 300, 765),  # -> 2048x153.6: 4 x 1 tiles
        (1536, 1024, 1105),  # -> 1152x768: 3 x 2 tiles
    ],
)
def test_high_detail_cost(width: int, height: int, tokens: int) -> None:
    assert high_detail_tokens(width, height) == tokens
    assert image_tokens(width, height, "high") == tokens


def test_high_detail_cost_is_symmetric() -> None:
    assert high_detail_tokens(3000, 1000) == high_detail_tokens(1000, 3000)


@pytest.mark.parametrize(("width", "height"), [(1, 1), (4096, 8192), (1024, 1024)])
def test_low_detail_is_flat(width: int, height: int) -> None:
    assert image_tokens(width, height, "low") == 85


@pytest.mark.parametrize(
    ("detail", "width", "height", "resolved"),
    [
        ("auto", 512, 512, "low"),
        ("auto", 100, 30, "low"),
        ("auto", 513, 100, "high"),
        ("auto", 100, 513, "high"),
        ("", 512, 512, "low"),
        ("", 1024, 10, "high"),
        ("low", 4096, 4096, "low"),
        ("high", 10, 10, "high"),
    ],
)
def test_detail_resolution(detail: str, width: int, height: int, resolved: str) -> None:
    assert resolve_detail(detail, width, height) == resolved


@pytest.mark.parametrize(
    ("fmt", "mime"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("GIF", "image/gif"), ("WEBP", "image/webp")],
)
def test_resolves_supported_formats(fmt: str, mime: str) -> None:
    data = encode(1024, 1024, fmt)
    # The declared type is not trusted: the content decides.
    res = resolve_image(data_url(data, "image/whatever"), "", "high", LIMITS)
    assert res.error == ""
    assert (res.mime_type, res.width, res.height) == (mime, 1024, 1024)
    assert res.detail == "high"
    assert res.tokens == 765
    assert res.sha256 == "sha256:" + hashlib.sha256(data).hexdigest()


def test_auto_detail_on_a_real_image() -> None:
    small = resolve_image(data_url(encode(300, 200)), "", "auto", LIMITS)
    assert (small.detail, small.tokens) == ("low", 85)
    large = resolve_image(data_url(encode(2048, 4096)), "", "auto", LIMITS)
    assert (large.detail, large.tokens) == ("high", 1105)


def test_same_bytes_same_descriptor() -> None:
    a = resolve_image(data_url(encode(64, 64)), "", "low", LIMITS)
    b = resolve_image(data_url(encode(64, 64)), "", "high", LIMITS)
    c = resolve_image(data_url(encode(64, 65)), "", "low", LIMITS)
    assert a.sha256 == b.sha256 != c.sha256


def test_base64_with_line_breaks_is_accepted() -> None:
    data = encode(40, 40)
    b64 = base64.encodebytes(data).decode()  # wrapped every 76 chars
    res = resolve_image(f"data:image/png;base64,{b64}", "", "low", LIMITS)
    assert res.error == ""
    assert (res.width, res.height) == (40, 40)


def test_percent_encoded_data_url() -> None:
    res = resolve_image(f"data:image/png,{quote_from_bytes(encode(8, 8))}", "", "low", LIMITS)
    assert res.error == ""
    assert res.mime_type == "image/png"


@pytest.mark.parametrize(
    ("url", "file_id", "detail", "error", "kind"),
    [
        ("", "file-abc", "auto", "file 'file-abc' not found", UNSUPPORTED_SOURCE),
        ("https://example.com/cat.png", "", "auto", "URLs are not fetched", UNSUPPORTED_SOURCE),
        ("HTTP://example.com/cat.png", "", "auto", "URLs are not fetched", UNSUPPORTED_SOURCE),
        ("ftp://example.com/cat.png", "", "auto", "must be a data: URL", UNSUPPORTED_SOURCE),
        ("", "", "auto", "neither url nor file_id", INVALID),
        ("data:image/png;base64,!!!not-base64!!!", "", "auto", "invalid base64", INVALID),
        ("data:image/png;base64", "", "auto", "malformed data URL", INVALID),
        ("data:image/png;base64,", "", "auto", "empty", INVALID),
        (data_url(b"definitely not an image"), "", "auto", "not a recognised image", CORRUPT),
        (data_url(encode(8, 8)), "", "medium", "invalid detail", INVALID),
    ],
)
def test_errors_are_reported_per_image(
    url: str, file_id: str, detail: str, error: str, kind: str
) -> None:
    res = resolve_image(url, file_id, detail, LIMITS)
    assert error in res.error and res.error_kind == kind
    assert (res.width, res.height, res.tokens, res.sha256) == (0, 0, 0, "")


def test_truncated_image_is_rejected() -> None:
    for fmt in ("PNG", "JPEG", "GIF", "WEBP"):
        data = encode(256, 256, fmt)
        res = resolve_image(data_url(data[: len(data) // 2]), "", "auto", LIMITS)
        assert res.error and res.error_kind == CORRUPT, fmt


def test_unsupported_format_is_rejected() -> None:
    res = resolve_image(data_url(encode(16, 16, "BMP"), "image/bmp"), "", "auto", LIMITS)
    assert "unsupported image format" in res.error and res.error_kind == UNSUPPORTED_FORMAT


def test_too_many_bytes() -> None:
    data = encode(256, 256)
    limits = Limits(max_image_bytes=len(data) - 1)
    res = resolve_image(data_url(data), "", "auto", limits)
    assert "too large" in res.error and res.error_kind == TOO_LARGE
    assert resolve_image(data_url(data), "", "auto", Limits(max_image_bytes=len(data))).error == ""


def test_oversized_base64_is_refused_before_decoding() -> None:
    # Not valid base64 at all: only the size check can produce this message.
    res = resolve_image("data:image/png;base64," + "!" * 4000, "", "auto", Limits(1000))
    assert "too large" in res.error


def test_too_many_pixels() -> None:
    # A small PNG (a 1-bit blank canvas) that decodes to 25 million pixels.
    data = encode(5000, 5000, "PNG", mode="1")
    assert len(data) < 20_000
    res = resolve_image(data_url(data), "", "auto", Limits(max_image_pixels=4000 * 4000))
    assert "too large" in res.error and res.error_kind == TOO_LARGE
    assert "5000x5000" in res.error
