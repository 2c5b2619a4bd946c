"""JSON in and out of the gateway: compact on the way out, API errors on the way in."""

from __future__ import annotations

import json
from typing import Any

from gateway.errors import invalid


def dumps(obj: Any) -> str:
    """Compact JSON, as every event and body leaves the gateway."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def parse_json(raw: bytes | str) -> Any:
    """A request body or frame, or an ``invalid_json`` ApiError saying why not."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise invalid(
            f"We could not parse the JSON body of your request: {err}.", None, "invalid_json"
        ) from None
