"""uvicorn's HTTP protocol with a bound on the time to receive a request's head.

uvicorn bounds only the idle time between requests (``timeout_keep_alive``, which any
byte resets): a client that connects and sends nothing, or trickles its headers one
byte at a time (slowloris), holds its connection, and its slot, forever. Here a timer
starts when a connection opens and whenever a new request begins arriving, and stops
once the request's head (request line and headers) is complete; if it fires first the
client gets 408 and the connection closes. A WebSocket upgrade is a request head like
any other, so the same bound covers it. Bodies are bounded by their size, and responses
(long SSE streams) are never timed.
"""

from __future__ import annotations

import asyncio
import logging

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

log = logging.getLogger(__name__)

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


class HeadTimeoutProtocol(HttpToolsProtocol):
    """HttpToolsProtocol, closing connections whose request head is too slow to arrive.
    ``head_timeout_s`` is given by a ``functools.partial`` (``gateway.__main__``), which
    uvicorn calls as it would call the class."""

    def __init__(self, *args, head_timeout_s: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.head_timeout_s = head_timeout_s
        self._head_timer: asyncio.TimerHandle | None = None

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
        if self._waiting_for_head():
            self._arm_head_timer()
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._disarm_head_timer()  # also before a WebSocket upgrade hands the socket over
        super().on_headers_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        super().connection_lost(exc)

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or not self._waiting_for_head():
            return
        log.info("closed a connection whose request head took over %ss", self.head_timeout_s)
        self.transport.write(TIMEOUT_RESPONSE % (len(TIMEOUT_BODY), TIMEOUT_BODY))
        self.transport.close()
