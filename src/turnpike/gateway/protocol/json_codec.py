"""JSON in and out of the gateway: compact on the way out, API errors on the way in.

orjson does both: several times faster than the standard library on the event stream
(every event of every response is encoded once), and strict where the standard library
is lenient: a lone surrogate or NaN is malformed JSON (a 400 naming the parameter that
holds it), never a value that breaks later. Nesting is bounded far below the parser's own
limit (``turnpike.gateway.protocol.bounds``).
"""

from __future__ import annotations

from typing import Any

import orjson

from turnpike.gateway.protocol import bounds
from turnpike.gateway.protocol.errors import invalid


def dumps(obj: Any) -> str:
    """Compact JSON text (what a WebSocket text frame carries)."""
    return orjson.dumps(obj).decode()


def dump_bytes(obj: Any, *, sort_keys: bool = False) -> bytes:
    """Compact JSON as UTF-8 bytes (bodies, SSE, and keys that hash it)."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS if sort_keys else 0)


def parse_json(raw: bytes | str) -> Any:
    """A request body or frame, or an ``invalid_json`` ApiError saying why not."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        reason = str(err)
        if reason.startswith("depth limit exceeded"):
            raise bounds.too_deep_for_parser() from None
        if "surrogate" in reason and (param := bounds.surrogate_param(raw)) is not None:
            raise invalid(
                f"Your request holds invalid Unicode: a lone surrogate in '{param}'.",
                param,
                "invalid_unicode",
            ) from None
        raise invalid(
            f"We could not parse the JSON body of your request: {reason}.", None, "invalid_json"
        ) from None
    bounds.check_depth(raw, body)
    return body
