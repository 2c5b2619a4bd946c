"""The imageres service's metrics (docs/observability.md, "Backend metrics"): images it
resolved, and the kinds of error it found (``turnpike.image_resolution.ERROR_KINDS``)."""

from __future__ import annotations

from prometheus_client import Counter

from turnpike.image_resolution import ERROR_KINDS, Resolution

RESOLVED = "resolved"

IMAGES = Counter(
    "turnpike_imageres_images",
    "Input images by result: resolved, or what was wrong with it: invalid (bad detail, "
    "data URL or base64, no source), unsupported_source (a remote URL, another scheme, a "
    "file id), too_large, unsupported_format, corrupt.",
    ["result"],
)

_BY_RESULT = {result: IMAGES.labels(result) for result in (RESOLVED, *ERROR_KINDS)}


def count(resolutions: list[Resolution]) -> None:
    for resolution in resolutions:
        _BY_RESULT[resolution.error_kind or RESOLVED].inc()
