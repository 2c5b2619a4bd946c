"""The load generator's two transports, as lean as each protocol allows (no SDK: the
client's own CPU must stay small beside the stack's).

- WebSocket: the ``websockets`` asyncio client, one socket per agent loop, one
  ``response.create`` frame per turn, frames read until a terminal event. Options as the
  official SDK sets them (no compression, no size limit).
- HTTP: ``POST /v1/responses`` with ``stream: true`` on a keep-alive connection of the
  loop's own, parsed by ``httptools``; only the terminal event's data is decoded (the
  ``event:`` line names every event).

A channel's ``turn`` returns the terminal event's response object, or raises
``TurnFailed`` with a short, countable kind ("socket dropped (close 1006)", "HTTP 429:
rate_limited", "response.failed: worker_error", ...). A refusal that asks to be tried
again later (503 ``server_overloaded``, a socket refused with 426) is ``retryable``, as
the official SDK and Codex treat it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

import httptools
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from bench.loop.variants import TERMINAL

WEBSOCKET = "websocket"
HTTP = "http"
TRANSPORTS = (WEBSOCKET, HTTP)
COMPLETED = "response.completed"
OVERLOADED = "server_overloaded"


class TurnFailed(Exception):
    """A turn (or a connection) that did not end in ``response.completed``. ``dropped``:
    the connection itself went away."""

    def __init__(
        self, kind: str, dropped: bool = False, message: str = "", retryable: bool = False
    ) -> None:
        super().__init__(kind)
        self.kind = kind
        self.dropped = dropped
        self.message = message[:300]  # the server's words, for the first of each kind
        self.retryable = retryable  # shed: the SDK waits its retry-after and asks again


@dataclass(slots=True)
class Reply:
    turn_ms: float  # request handed to the transport -> terminal event
    ttft_ms: float  # -> first delta event (the terminal event when there is none)
    response: dict[str, Any]  # the terminal event's response object


def failure_of(event: dict[str, Any]) -> TurnFailed:
    """A terminal event other than ``response.completed``, as an error kind."""
    kind = event.get("type")
    if kind == "error":
        error = event.get("error") or {}
        code = error.get("code") or error.get("type")
        return TurnFailed(f"error {event.get('status', '?')}: {code}", retryable=code == OVERLOADED)
    response = event.get("response") or {}
    if kind == "response.incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason")
        return TurnFailed(f"response.incomplete: {reason}")
    error = response.get("error") or {}
    return TurnFailed(f"{kind}: {error.get('code')}", message=_message(error))


def _message(error: Any) -> str:
    return str(error.get("message") or "") if isinstance(error, dict) else ""


def http_failure(status: int, body: bytes) -> TurnFailed:
    """A non-200 answer to the POST, by its status and the API error's code."""
    try:
        error = json.loads(body).get("error") or {}
    except (ValueError, AttributeError):
        error = {}
    code = error.get("code") if isinstance(error, dict) else None
    return TurnFailed(
        f"HTTP {status}" + (f": {code}" if code else ""),
        message=_message(error),
        retryable=code == OVERLOADED,
    )


_TYPE_FIRST = '{"type":"'


def frame_type(frame: str | bytes) -> str:
    """A WebSocket event's type. The gateway writes compact JSON with ``type`` first, so it
    is read from the frame's opening bytes and the rest (the response object, 5 KB, on
    ``response.created`` and ``in_progress``) is decoded only for the terminal event;
    any other frame is decoded whole."""
    if isinstance(frame, str) and frame.startswith(_TYPE_FIRST):
        end = frame.find('"', len(_TYPE_FIRST))
        if end > 0 and "\\" not in frame[:end]:
            return frame[len(_TYPE_FIRST) : end]
    event = json.loads(frame)
    return str(event.get("type")) if isinstance(event, dict) else ""


class Channel(Protocol):
    """One agent loop's connection to the gateway."""

    @property
    def is_open(self) -> bool: ...

    async def open(self) -> None: ...

    async def turn(self, body: dict[str, Any]) -> Reply: ...

    async def close(self) -> None: ...


def _ms(start: float, end: float) -> float:
    return (end - start) * 1000


class WsChannel:
    def __init__(self, url: str, api_key: str) -> None:
        self.url = url
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.ws: ClientConnection | None = None

    @property
    def is_open(self) -> bool:
        return self.ws is not None

    async def open(self) -> None:
        try:
            self.ws = await connect(
                self.url,
                additional_headers=self.headers,
                user_agent_header=None,
                max_size=None,
                compression=None,
            )
        except InvalidStatus as exc:
            status = exc.response.status_code
            # 426: no room for a socket now (Codex would go on over HTTP; here, try again).
            raise TurnFailed(f"connect refused: HTTP {status}", retryable=status == 426) from None
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise TurnFailed(f"connect failed: {type(exc).__name__}") from None

    async def turn(self, body: dict[str, Any]) -> Reply:
        ws = self.ws
        assert ws is not None, "open() first"
        start = time.perf_counter()
        ttft = None
        try:
            await ws.send(json.dumps({"type": "response.create", **body}))
            while True:
                frame = await ws.recv()
                kind = frame_type(frame)
                if kind in TERMINAL:
                    end = time.perf_counter()
                    event = json.loads(frame)
                    if kind != COMPLETED:
                        raise failure_of(event)
                    return Reply(_ms(start, end), _ms(start, ttft or end), event["response"])
                if ttft is None and kind.endswith(".delta"):
                    ttft = time.perf_counter()
        except ConnectionClosed as exc:
            self.ws = None
            code = exc.rcvd.code if exc.rcvd is not None else 1006
            raise TurnFailed(f"socket dropped (close {code})", dropped=True) from None
        except WebSocketException as exc:
            await self.close()
            raise TurnFailed(f"socket dropped ({type(exc).__name__})", dropped=True) from None

    async def close(self) -> None:
        ws, self.ws = self.ws, None
        if ws is not None:
            await ws.close()


class SseChannel:
    """One keep-alive HTTP/1.1 connection per loop over asyncio streams, its answers parsed
    by ``httptools`` (uvicorn's C parser): about a third of httpx's client CPU per turn on
    this workload (h11 by hand: half)."""

    def __init__(self, base_url: str, api_key: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.head = (
            f"POST {parts.path.rstrip('/')}/responses HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Authorization: Bearer {api_key}\r\nContent-Type: application/json\r\n"
            "Content-Length: "
        ).encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.parser: httptools.HttpResponseParser | None = None
        self._reset()

    @property
    def is_open(self) -> bool:
        return self.writer is not None

    async def open(self) -> None:
        try:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        except OSError as exc:
            raise TurnFailed(f"connect failed: {type(exc).__name__}") from None
        self.parser = httptools.HttpResponseParser(self)  # calls the on_* methods below

    def _reset(self) -> None:
        self._status = 0
        self._complete = False
        self._keep_alive = True
        self._buffer = b""
        self._ttft: float | None = None
        self._end: float | None = None
        self._terminal: dict[str, Any] | None = None

    # -- httptools callbacks ----------------------------------------------------------

    def on_headers_complete(self) -> None:
        assert self.parser is not None
        self._status = self.parser.get_status_code()

    def on_body(self, data: bytes) -> None:
        self._buffer += data
        if self._status != 200:
            return  # an API error's JSON, read whole at the end
        *events, self._buffer = self._buffer.split(b"\n\n")
        for raw in events:
            kind, data_lines = sse_event(raw)
            if kind in TERMINAL:
                if self._terminal is None:
                    self._end = time.perf_counter()
                    self._terminal = json.loads(b"\n".join(data_lines))
            elif self._ttft is None and kind.endswith(".delta"):
                self._ttft = time.perf_counter()

    def on_message_complete(self) -> None:
        assert self.parser is not None
        self._complete = True
        self._keep_alive = self.parser.should_keep_alive()  # reset once feed_data returns

    # ---------------------------------------------------------------------------------

    async def turn(self, body: dict[str, Any]) -> Reply:
        if self.writer is None:  # the server closed the last one (Connection: close)
            await self.open()
        assert self.reader is not None and self.writer is not None and self.parser is not None
        content = json.dumps({**body, "stream": True}).encode()
        self._reset()
        start = time.perf_counter()
        try:
            self.writer.write(self.head + b"%d\r\n\r\n" % len(content) + content)
            while not self._complete:
                chunk = await self.reader.read(65536)
                if not chunk:
                    raise TurnFailed("connection dropped: closed by the server", dropped=True)
                self.parser.feed_data(chunk)
        except (OSError, httptools.HttpParserError) as exc:
            await self.close()
            raise TurnFailed(f"connection dropped: {type(exc).__name__}", dropped=True) from None
        except TurnFailed:
            await self.close()
            raise
        if not self._keep_alive:
            await self.close()  # the next turn connects again
        if self._status != 200:
            raise http_failure(self._status, self._buffer)
        if self._terminal is None or self._end is None:
            raise TurnFailed("stream ended without a terminal event")
        if self._terminal.get("type") != COMPLETED:
            raise failure_of(self._terminal)
        end = self._end
        return Reply(_ms(start, end), _ms(start, self._ttft or end), self._terminal["response"])

    async def close(self) -> None:
        writer, self.writer, self.reader, self.parser = self.writer, None, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def sse_event(raw: bytes) -> tuple[str, list[bytes]]:
    """One Server-Sent Event's ``event:`` name and ``data:`` lines (the gateway writes
    both; ``data: [DONE]`` has no name)."""
    kind, data = "", []
    for line in raw.split(b"\n"):
        if line.startswith(b"event:"):
            kind = line[6:].strip().decode()
        elif line.startswith(b"data:"):
            data.append(line[6:] if line[5:6] == b" " else line[5:])
    return kind, data


def ws_url(base_url: str) -> str:
    """``http://host:port/v1`` -> ``ws://host:port/v1/responses``."""
    scheme, rest = base_url.rstrip("/").split("://", 1)
    return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/responses"
