"""Reading a worker's Generate stream (or GenerateBatched's, whose messages each hold
the events due at once: read one by one here): cancelled when its reader stops early,
and bounded in silence.

A cancelled call tells the worker to stop generating, so the stream is cancelled
whenever its reader leaves (a cancelled background response, an abandoned one).

A worker cut off the network mid-stream sends nothing and reports no error: TCP alone
would keep the call open for many minutes, and the response with it. So the stream may
stay silent (no event) for ``silence_s`` at most; then the call is cancelled and
``WorkerSilentError`` raised, which the engine treats like an unavailable worker. One
timer per stream, re-armed only when it fires: an event costs a clock read.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

from turnpike.inference.v1.inference_pb2 import GenerateEvents


class WorkerSilentError(Exception):
    """The worker's stream sent nothing for the bound; its call was cancelled."""


async def worker_events(stream: Any, silence_s: float) -> AsyncGenerator[Any, None]:
    loop = asyncio.get_running_loop()
    heard = loop.time()
    silent = False
    timer: asyncio.TimerHandle  # bound below, before check can run

    def check() -> None:
        nonlocal timer, silent
        left = heard + silence_s - loop.time()
        if left > 0:
            timer = loop.call_later(left, check)
            return
        silent = True
        stream.cancel()  # the pending read then raises CancelledError

    timer = loop.call_later(silence_s, check)
    try:
        async for message in stream:
            heard = loop.time()
            if isinstance(message, GenerateEvents):
                for event in message.events:
                    yield event
            else:
                yield message
    except asyncio.CancelledError:
        if silent:
            raise WorkerSilentError(f"the worker sent nothing for {silence_s:g} s") from None
        raise
    finally:
        timer.cancel()
        stream.cancel()
