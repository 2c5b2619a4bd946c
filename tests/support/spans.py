"""Finished OpenTelemetry spans, as tests read them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan


def attributes(span: ReadableSpan) -> Mapping[str, Any]:
    """The span's attributes (OpenTelemetry types them as optional), their values as
    recorded: a string, a number, a boolean, or a sequence of one of those."""
    assert span.attributes is not None, span.name
    return span.attributes
