"""ConnectionStreams streams of client connections: one stream to safety and one to the tokenizer
per connection, so that a turn costs a message each way instead of a call, and safety
keeps what it has scored of the connection's conversations on its side.

A WebSocket's session lives as long as the socket. A chain of HTTP turns has no
connection of its own: its session is found by the conversation it continues, and is
closed once it has been idle for ``idle_s``. Sessions are bounded per gateway process
(``max_sessions``): a chain's session is the first to go (least recently used), and a
WebSocket opened when every place is a WebSocket's gets none (its turns ask by calls).

``ConnectionStreams`` keeps, for safety, which response of each conversation the far side's state
has folded last (in the stream's current generation): a turn continuing that response
sends only its new items; any other (a fork, a new stream) sends the whole history.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.upstream.backends import Backends, ClientErrors, Refused, failure
from turnpike.gateway.upstream.session_stream import SessionStream
from turnpike.safety.v1 import safety_pb2
from turnpike.session.v1 import session_pb2
from turnpike.tokenizer.v1 import tokenizer_pb2


class ConnectionStreams:
    """The streams of one client connection."""

    def __init__(self, backends: Backends, timeout_s: float) -> None:
        self.safety: SessionStream[
            safety_pb2.ClassifySessionRequest, safety_pb2.ClassifySessionReply
        ] = SessionStream(
            "safety",
            "turnpike.safety.v1.Safety/ClassifySession",
            backends.safety.ClassifySession,
            timeout_s,
        )
        self.tokenizer: SessionStream[
            tokenizer_pb2.RenderSessionRequest, tokenizer_pb2.RenderSessionReply
        ] = SessionStream(
            "tokenizer",
            "turnpike.tokenizer.v1.Tokenizer/RenderSession",
            backends.tokenizer.RenderSession,
            timeout_s,
        )
        # conversation id -> (the safety stream's generation, the response it folded last)
        self._folded: dict[str, tuple[int, str]] = {}
        self.used_at = time.monotonic()

    def safety_holds(self, conversation_id: str, response_id: str | None) -> bool:
        """Whether the safety stream's state of the conversation ends with ``response_id``
        (a turn continuing it may send only its new items)."""
        if response_id is None or not self.safety.open:
            return False
        return self._folded.get(conversation_id) == (self.safety.generation, response_id)

    def safety_folded(self, conversation_id: str, response_id: str, generation: int) -> None:
        """The safety stream of ``generation`` has folded ``response_id``'s input."""
        if len(self._folded) >= MAX_CONVERSATIONS and conversation_id not in self._folded:
            self._folded.pop(next(iter(self._folded)))  # the oldest: as the far side forgets
        self._folded[conversation_id] = (generation, response_id)

    def close(self) -> None:
        self.safety.close()
        self.tokenizer.close()


# Conversations a session remembers for safety: the far side keeps as many per stream
# (turnpike.safety.server.SESSION_CONVERSATIONS).
MAX_CONVERSATIONS = 64


@dataclass(frozen=True)
class SessionSettings:
    enabled: bool
    max_sessions: int  # per gateway process, WebSockets' and HTTP chains' together
    idle_s: float  # an HTTP chain's session is closed after this long unused
    timeout_s: float  # a reply on a stream; past it the stream is broken


class Sessions:
    """Every session of this gateway process."""

    def __init__(self, backends: Backends, settings: SessionSettings) -> None:
        self.backends = backends
        self.settings = settings
        self._sockets = 0
        self._chains: OrderedDict[tuple[str, str], ConnectionStreams] = OrderedDict()

    def __len__(self) -> int:
        return self._sockets + len(self._chains)

    def for_socket(self) -> ConnectionStreams | None:
        """A new WebSocket's session, or None (sessions off, or every place a socket's);
        ``socket_closed`` when the socket ends."""
        if not self.settings.enabled:
            return None
        self.expire()
        while len(self) >= self.settings.max_sessions and self._chains:
            self._chains.popitem(last=False)[1].close()
        if len(self) >= self.settings.max_sessions:
            return None
        self._sockets += 1
        return ConnectionStreams(self.backends, self.settings.timeout_s)

    def socket_closed(self, session: ConnectionStreams) -> None:
        session.close()
        self._sockets -= 1

    def for_chain(self, tenant: str, conversation_id: str) -> ConnectionStreams | None:
        """The session of a chain of HTTP turns (the conversation it continues), made on its
        first turn; None when sessions are off or every place is a socket's."""
        if not self.settings.enabled:
            return None
        self.expire()
        key = (tenant, conversation_id)
        session = self._chains.get(key)
        if session is None:
            while len(self) >= self.settings.max_sessions and self._chains:
                self._chains.popitem(last=False)[1].close()
            if len(self) >= self.settings.max_sessions:
                return None
            session = self._chains[key] = ConnectionStreams(self.backends, self.settings.timeout_s)
        else:
            self._chains.move_to_end(key)
        session.used_at = time.monotonic()
        return session

    def expire(self, now: float | None = None) -> None:
        """Close the chains' sessions idle for ``idle_s`` (oldest first, so it stops at the
        first one still in use)."""
        now = time.monotonic() if now is None else now
        while self._chains:
            key, session = next(iter(self._chains.items()))
            if now - session.used_at < self.settings.idle_s:
                break
            del self._chains[key]
            session.close()

    def close(self) -> None:
        for session in self._chains.values():
            session.close()
        self._chains.clear()


def refusal_error(
    service: str, refusal: session_pb2.Refusal, client_errors: ClientErrors | None = None
) -> ApiError:
    """The API error a refusal on a session stream stands for: the one the same request's
    call would have failed with (``Backends.call``)."""
    return failure(service, Refused(refusal), client_errors)
