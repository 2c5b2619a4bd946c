"""The gateway's end of a session stream (turnpike.gateway.upstream.session_stream) and
the sessions of client connections (turnpike.gateway.upstream.sessions), against an
in-process stand-in for the service's end of the stream."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from turnpike.gateway.upstream.session_stream import SessionStream, StreamBroken
from turnpike.gateway.upstream.sessions import ConnectionStreams, Sessions, SessionSettings
from turnpike.safety.v1 import safety_pb2


@dataclass
class FakeCall:
    """A stream's far end: answers each request with its seq (and ``tag``), unless told
    to hold its answers; ``cancel`` ends it, as grpc's does."""

    tag: str = ""
    hold: bool = False
    fail_writes: bool = False
    written: list[Any] = field(default_factory=list)
    cancelled: bool = False
    _replies: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)

    async def write(self, request: Any) -> None:
        if self.fail_writes or self.cancelled:
            raise RuntimeError("the call is done")
        self.written.append(request)
        if not self.hold:
            self.answer(request.seq)

    def answer(self, seq: int, conversation: str | None = None) -> None:
        reply = safety_pb2.ClassifySessionReply(seq=seq)
        reply.response.items_seen = seq
        self._replies.put_nowait(reply)

    def end(self) -> None:
        self._replies.put_nowait(grpc.aio.EOF)

    async def read(self) -> Any:
        if self.cancelled:
            raise asyncio.CancelledError
        return await self._replies.get()

    def cancel(self) -> bool:
        self.cancelled = True
        self._replies.put_nowait(grpc.aio.EOF)
        return True


class Opener:
    """Opens a new FakeCall each time, keeping them all."""

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.calls: list[FakeCall] = []

    def __call__(self) -> FakeCall:
        call = FakeCall(**self.options)
        self.calls.append(call)
        return call


def ask() -> safety_pb2.ClassifySessionRequest:
    return safety_pb2.ClassifySessionRequest(request=safety_pb2.ClassifyRequest(tenant="t"))


def stream(opener: Opener, timeout_s: float = 5.0) -> SessionStream:
    return SessionStream("safety", "ClassifySession", opener, timeout_s)


async def test_replies_go_to_their_requests_in_order() -> None:
    opener = Opener()
    s = stream(opener)
    answers = await asyncio.gather(*(s.exchange(ask()) for _ in range(5)))
    assert [a.reply.seq for a in answers] == [1, 2, 3, 4, 5]
    assert {a.generation for a in answers} == {1}
    assert len(opener.calls) == 1  # one stream for every turn
    s.close()
    assert opener.calls[0].cancelled


async def test_a_turn_that_stops_waiting_leaves_its_reply_unread() -> None:
    opener = Opener(hold=True)
    s = stream(opener)
    first = asyncio.create_task(s.exchange(ask()))
    second = asyncio.create_task(s.exchange(ask()))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    first.cancel()  # its client left
    call = opener.calls[0]
    call.answer(1)
    call.answer(2)
    assert (await second).reply.seq == 2
    assert s.open  # nothing broke


async def test_a_late_reply_breaks_the_stream_and_the_next_turn_opens_another() -> None:
    opener = Opener(hold=True)
    s = stream(opener, timeout_s=0.05)
    waiting = asyncio.create_task(s.exchange(ask()))
    with pytest.raises(StreamBroken):
        await s.exchange(ask())  # not answered within the deadline
    with pytest.raises(StreamBroken):
        await waiting  # everyone waiting on that stream asks by a call
    assert opener.calls[0].cancelled and not s.open
    opener.options["hold"] = False
    answered = await s.exchange(ask())
    assert answered.generation == 2 and answered.reply.seq == 3  # a new stream, new state


async def test_a_reply_out_of_order_breaks_the_stream() -> None:
    opener = Opener(hold=True)
    s = stream(opener)
    waiting = asyncio.create_task(s.exchange(ask()))
    await asyncio.sleep(0)
    opener.calls[0].answer(7)
    with pytest.raises(StreamBroken, match="reply 7 where 1 was due"):
        await waiting


async def test_a_stream_the_service_ends_or_that_cannot_be_written_is_broken() -> None:
    opener = Opener(hold=True)
    s = stream(opener)
    waiting = asyncio.create_task(s.exchange(ask()))
    await asyncio.sleep(0)
    opener.calls[0].end()  # the service restarted
    with pytest.raises(StreamBroken):
        await waiting
    opener.options.update(hold=False, fail_writes=True)
    with pytest.raises(StreamBroken, match="write failed"):
        await s.exchange(ask())


async def test_a_closed_stream_answers_nothing() -> None:
    s = stream(Opener())
    s.close()
    with pytest.raises(StreamBroken, match="closed"):
        await s.exchange(ask())


# -- the sessions of client connections ----------------------------------------------


class FakeStubs:
    """What ConnectionStreams opens its streams with."""

    def __init__(self) -> None:
        self.safety = type("S", (), {"ClassifySession": Opener()})()
        self.tokenizer = type("T", (), {"RenderSession": Opener()})()


def sessions(max_sessions: int = 3, enabled: bool = True) -> Sessions:
    settings = SessionSettings(enabled, max_sessions, idle_s=60.0, timeout_s=5.0)
    return Sessions(FakeStubs(), settings)  # type: ignore[arg-type]


def test_sessions_off_give_none() -> None:
    off = sessions(enabled=False)
    assert off.for_socket() is None and off.for_chain("t", "c") is None


def test_a_chain_keeps_its_session_and_idle_ones_close() -> None:
    registry = sessions()
    first = registry.for_chain("t", "c1")
    assert first is not None and registry.for_chain("t", "c1") is first
    assert registry.for_chain("other-tenant", "c1") is not first  # never shared
    registry.expire(now=first.used_at + 61)
    assert first.safety.closed and len(registry) == 0


def test_the_least_recent_chain_makes_room_and_sockets_are_never_closed_for_it() -> None:
    registry = sessions(max_sessions=2)
    a, b = registry.for_chain("t", "a"), registry.for_chain("t", "b")
    assert a is not None and b is not None
    registry.for_chain("t", "a")  # a used again: b is the least recent
    socket = registry.for_socket()
    assert socket is not None and b.safety.closed and not a.safety.closed
    other = registry.for_socket()
    assert other is not None and a.safety.closed
    assert registry.for_socket() is None  # every place a socket's: calls only
    assert registry.for_chain("t", "c") is None
    registry.socket_closed(socket)
    assert socket.safety.closed and registry.for_chain("t", "c") is not None


async def test_safety_state_is_known_only_for_the_response_it_folded_on_this_stream() -> None:
    streams = ConnectionStreams(FakeStubs(), 5.0)  # type: ignore[arg-type]
    assert not streams.safety_holds("conv", "resp_1")  # no stream yet
    answered = await streams.safety.exchange(ask())
    streams.safety_folded("conv", "resp_1", answered.generation)
    assert streams.safety_holds("conv", "resp_1")
    assert not streams.safety_holds("conv", "resp_0")  # a fork of an earlier response
    assert not streams.safety_holds("conv", None)  # no parent: the whole history
    streams.safety.close()
    assert not streams.safety_holds("conv", "resp_1")  # the far side's state went with it
