"""uvicorn's HTTP and WebSocket protocols with bounds on slow clients.

Write stalls: a client that stops reading (its SSE stream or its socket) fills the
connection's buffers; the transport then pauses the writer, and the response waits.
Both protocols here abort such a connection once it has stayed paused for
``write_stall_s``: the response sees a disconnect and stops (the worker stops
generating, and billing charges what was generated), and the connection's memory is
bounded by the transport's buffer meanwhile (the events waiting behind it are merged:
turnpike.gateway.engine.event_queue).

Request heads:

uvicorn bounds only the idle time between requests (``timeout_keep_alive``, which any
byte resets): a client that connects and sends nothing, or trickles its headers one
byte at a time (slowloris), holds its connection, and its slot, forever. Here a timer
starts when a connection opens and whenever a new request begins arriving, and stops
once the request's head (request line and headers) is complete; if it fires first the
client gets 408 and the connection closes. A WebSocket upgrade is a request head like
any other, so the same bound covers it. Bodies are bounded by their size, and responses
(long SSE streams) are never timed.

Deploys: on SIGTERM uvicorn stops accepting, then closes every WebSocket at once (1012),
in the middle of the responses they carry. Here a socket is instead asked to drain: the
app gets a receive message marked ``DRAIN`` and closes the socket itself (1012, on which
the SDK reconnects) once its responses have ended. uvicorn waits for that up to its
graceful-shutdown timeout, then closes what is left as before.

Writes: a response's events that are ready at once (an item's start and its first
delta; the last delta, the item's end and the response's end) leave in one write: the
app marks a frame ``CORK`` when another follows at once, and the frames held are
written with the next one not so marked (or, whatever happens, before the loop's next
round). One system call instead of one per frame.

The 408 closes as nginx's "lingering close" does: the server stops writing, then reads
and discards what the client still sends for up to ``LINGER_S`` before closing. Closing
at once would make the kernel answer a client still sending with a reset, which can
discard the 408 before the client reads it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.websockets.wsproto_impl import WSProtocol
from wsproto import ConnectionState, events

log = logging.getLogger(__name__)

LINGER_S = 2.0
# The key of the receive message that asks the app to drain its socket (its only key
# besides ``type``: a receive with no text and no bytes, which no client can send).
DRAIN = "turnpike.drain"
# The key of a ``websocket.send`` message whose frame may wait for the next one (the app
# sends another at once): see "Writes" above.
CORK = "turnpike.cork"
TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\n"
    b"content-type: application/json\r\n"
    b"connection: close\r\n"
    b"content-length: %d\r\n\r\n%s"
)
TIMEOUT_BODY = (
    b'{"error":{"message":"The request head (request line and headers) did not arrive '
    b'in time.","type":"invalid_request_error","code":"request_timeout","param":null}}'
)


class WriteStallMixin:
    """Aborts the connection once its transport has paused writing for ``write_stall_s``."""

    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    write_stall_s: float
    _stall_timer: asyncio.TimerHandle | None = None

    def pause_writing(self) -> None:
        super().pause_writing()  # type: ignore[misc]
        if self._stall_timer is None:
            self._stall_timer = self.loop.call_later(self.write_stall_s, self._write_stalled)

    def resume_writing(self) -> None:
        self._cancel_stall_timer()
        super().resume_writing()  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_stall_timer()
        super().connection_lost(exc)  # type: ignore[misc]

    def _cancel_stall_timer(self) -> None:
        if self._stall_timer is not None:
            self._stall_timer.cancel()
            self._stall_timer = None

    def _write_stalled(self) -> None:
        self._stall_timer = None
        log.info("aborted a connection that read nothing for %ss", self.write_stall_s)
        self.transport.abort()  # close() would wait to flush what the client never reads


class CorkedTransport:
    """A transport whose writes may be held and then leave together (``cork``, then
    ``uncork``); everything else goes to the transport it wraps."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] | None = None

    def cork(self) -> None:
        if self._held is None:
            self._held = []
            self._loop.call_soon(self.uncork)  # held for this round of the loop at most

    def uncork(self) -> None:
        held, self._held = self._held, None
        if held and not self._transport.is_closing():
            self._transport.write(b"".join(held))

    def write(self, data: bytes) -> None:
        if self._held is not None:
            self._held.append(data)
        else:
            self._transport.write(data)

    def close(self) -> None:
        self.uncork()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedWSProtocol(WriteStallMixin, WSProtocol):
    """uvicorn's wsproto protocol, aborting a socket whose client stopped reading,
    failing a connection that breaks the protocol with a close frame, and writing the
    frames the app sends at once together (``CORK``)."""

    def __init__(self, *args: Any, write_stall_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.write_stall_s = write_stall_s
        self._drain_asked = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        corked = CorkedTransport(transport, self.loop)
        super().connection_made(corked)  # type: ignore[arg-type]

    async def send(self, message: Any) -> None:
        corked = message["type"] == "websocket.send" and message.pop(CORK, False)
        transport: CorkedTransport = self.transport  # type: ignore[assignment]
        if corked:
            transport.cork()
        try:
            await super().send(message)
        finally:
            if not corked:
                transport.uncork()

    def shutdown(self) -> None:
        """The server is stopping: an open socket drains (the app closes it once its
        responses end); uvicorn calls this again to force what is left."""
        if self.handshake_complete and not self.close_sent and not self._drain_asked:
            self._drain_asked = True
            # Not one of ASGI's typed events: the app's loop looks for the key first.
            self.queue.put_nowait({"type": "websocket.receive", DRAIN: True})  # type: ignore[arg-type]
            return
        super().shutdown()

    def handle_close(self, event: events.CloseConnection) -> None:
        # wsproto reports a frame it cannot parse (a text frame that is not UTF-8: 1007)
        # as if the client had closed, with the connection still open; uvicorn then drops
        # the socket without a close frame. Send ours first, with the failure's code, so
        # the client learns why (RFC 6455, 7.1.7).
        if not self.close_sent and self.conn.state == ConnectionState.OPEN:
            reason = (event.reason or "")[:120]  # a close frame's payload is 125 bytes at most
            self.transport.write(self.conn.send(events.CloseConnection(event.code, reason)))
        super().handle_close(event)


class HeadTimeoutProtocol(WriteStallMixin, HttpToolsProtocol):
    """HttpToolsProtocol, closing connections whose request head is too slow to arrive,
    or whose client stopped reading. The bounds are given by a ``functools.partial``
    (``turnpike.gateway.__main__``), which uvicorn calls as it would call the class."""

    def __init__(
        self, *args: Any, head_timeout_s: float, write_stall_s: float, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.head_timeout_s = head_timeout_s
        self.write_stall_s = write_stall_s
        self._head_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _waiting_for_head(self) -> bool:
        """No request is being answered: bytes now belong to the next request's head."""
        return self.cycle is None or self.cycle.response_complete

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        if self._linger_timer is not None:
            return  # answered and closing: what the client still sends is discarded
        if self._waiting_for_head():
            self._arm_head_timer()
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._disarm_head_timer()  # also before a WebSocket upgrade hands the socket over
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        if self._linger_timer is not None:
            self._linger_timer.cancel()
        super().connection_lost(exc)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._waiting_for_head():
            return
        log.info("closed a connection whose request head took over %ss", self.head_timeout_s)
        self.transport.write(TIMEOUT_RESPONSE % (len(TIMEOUT_BODY), TIMEOUT_BODY))
        self.transport.write_eof()
        self._linger_timer = self.loop.call_later(LINGER_S, self.transport.close)
