"""JSON in and out of the gateway: compact on the way out, API errors on the way in.

orjson does both: several times faster than the standard library on the event stream
(every event of every response is encoded once), and strict where the standard library
is lenient: a lone surrogate, NaN, or nesting deeper than 1,024 levels is malformed JSON
(a 400), never a value that breaks later.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import invalid


def dumps(obj: Any) -> str:
    """Compact JSON text (what a WebSocket text frame carries)."""
    return orjson.dumps(obj).decode()


def dump_bytes(obj: Any, *, sort_keys: bool = False) -> bytes:
    """Compact JSON as UTF-8 bytes (bodies, SSE, and keys that hash it)."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS if sort_keys else 0)


def parse_json(raw: bytes | str) -> Any:
    """A request body or frame, or an ``invalid_json`` ApiError saying why not."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise invalid(
            f"We could not parse the JSON body of your request: {err}.", None, "invalid_json"
        ) from None
