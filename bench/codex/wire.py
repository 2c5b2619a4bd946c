"""What Codex put on the wire for each request, read from its own trace log (pure: parses
the text). Two log targets print every request body: ``codex_http_client::transport``
("POST to URL: {json}") over HTTP, and ``tungstenite::protocol`` ("Sending frame: ...
payload: b\"...\"", a Rust byte string) over WebSocket; ``WIRE_LOG`` switches on those
two alone."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

WIRE_LOG = "warn,codex_http_client::transport=trace,tungstenite::protocol=trace," + (
    "tungstenite::protocol::frame=warn"
)
_POST = "codex_http_client::transport: POST to "
_FRAME = "tungstenite::protocol: Sending frame: "
_PAYLOAD = re.compile(r'payload: b"(.*)" \}\s*$')
_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "0": b"\0", "\\": b"\\", '"': b'"', "'": b"'"}


@dataclass(frozen=True)
class WireRequest:
    transport: str  # "http" or "websocket"
    bytes: int  # the request body or the frame's payload
    input_items: int
    previous_response_id: bool
    store: bool | None
    generate: bool  # False: Codex's WebSocket warm-up, which generates nothing


def rust_bytes(text: str) -> bytes:
    """The bytes a Rust ``b"..."`` literal's body (as ``{:?}`` prints it) stands for."""
    out = bytearray()
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\":
            out += char.encode()
            i += 1
        elif text[i + 1] == "x":
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        else:
            out += _ESCAPES[text[i + 1]]
            i += 2
    return bytes(out)


def _request(transport: str, body: bytes) -> WireRequest | None:
    try:
        payload = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(payload, dict) or payload.get("type", "response.create") != (
        "response.create"
    ):
        return None
    items = payload.get("input")
    return WireRequest(
        transport=transport,
        bytes=len(body),
        input_items=len(items) if isinstance(items, list) else 1,
        previous_response_id=bool(payload.get("previous_response_id")),
        store=payload.get("store"),
        generate=payload.get("generate") is not False,
    )


def parse_wire_log(log: str) -> list[WireRequest]:
    """Every Responses request of the log, in order (other frames and lines skipped)."""
    requests: list[WireRequest] = []
    for line in log.splitlines():
        found: WireRequest | None = None
        if _POST in line:
            _, _, body = line.split(_POST, 1)[1].partition(": ")
            found = _request("http", body.encode())
        elif _FRAME in line and (match := _PAYLOAD.search(line)):
            found = _request("websocket", rust_bytes(match.group(1)))
        if found is not None:
            requests.append(found)
    return requests
