"""The write-stall bound of the gateway's uvicorn protocols (turnpike.gateway.api.uvicorn_protocols), on
the protocol itself: a transport paused for longer than the bound is aborted (a client
that never reads its SSE stream or socket), one that resumes in time is not."""

from __future__ import annotations

import asyncio

from turnpike.gateway.api.uvicorn_protocols import WriteStallMixin

STALL_S = 0.05


class Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.aborted = asyncio.Event()

    def abort(self) -> None:
        self.aborted.set()


class Base:
    """What uvicorn's protocols do on these calls, reduced to a flag."""

    paused = False

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False

    def connection_lost(self, exc: Exception | None) -> None:
        pass


class Protocol(WriteStallMixin, Base):
    transport: Transport

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.transport = Transport()
        self.write_stall_s = STALL_S


async def test_a_transport_paused_past_the_bound_is_aborted() -> None:
    protocol = Protocol()
    protocol.pause_writing()
    assert protocol.paused  # uvicorn's own pause still happens
    await asyncio.wait_for(protocol.transport.aborted.wait(), 10)


async def test_a_transport_that_resumes_or_closes_is_left_alone() -> None:
    resumed, lost = Protocol(), Protocol()
    resumed.pause_writing()
    resumed.resume_writing()
    lost.pause_writing()
    lost.connection_lost(None)
    await asyncio.sleep(4 * STALL_S)
    assert not resumed.transport.aborted.is_set() and not resumed.paused
    assert not lost.transport.aborted.is_set()
