"""The gateway's JSON response, encoded like every event (``json_codec``)."""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse as StarletteJSONResponse

from turnpike.gateway.protocol.json_codec import dump_bytes


class JSONResponse(StarletteJSONResponse):
    def render(self, content: Any) -> bytes:
        return dump_bytes(content)
