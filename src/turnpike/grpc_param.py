"""Which request field a backend's refusal (INVALID_ARGUMENT) is about.

A gRPC status holds only a code and a message, so a backend that knows the field at
fault sends its name, in the API's terms (``tools[1].description``), as trailing
metadata; the gateway's 400 then names it as ``param``. Nothing is sent on success.
"""

from __future__ import annotations

from typing import Any, Protocol

PARAM_METADATA_KEY = "turnpike-param"


def param_metadata(param: str | None) -> tuple[tuple[str, str], ...]:
    """The trailing metadata that names ``param`` (none when it is unknown)."""
    return ((PARAM_METADATA_KEY, param),) if param else ()


class HasTrailingMetadata(Protocol):
    def trailing_metadata(self) -> Any: ...


def refused_param(err: HasTrailingMetadata, default: str) -> str:
    """The field the refusal names, or ``default`` when it names none."""
    for key, value in err.trailing_metadata() or ():
        if key == PARAM_METADATA_KEY and isinstance(value, str):
            return value
    return default
