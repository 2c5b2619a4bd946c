"""A stopping gateway's grace before it stops listening (a lame duck): on the first
SIGTERM, ``/readyz`` answers 503 at once while everything is served as before, and only
``delay_s`` later does uvicorn's own shutdown begin (the port closes, responses in flight
finish, each WebSocket closes with 1012 between responses). A load balancer that checks
readiness (HAProxy every 2 s, a Kubernetes Service's endpoints) stops sending new
requests meanwhile, so none reaches a closed port: a rolling restart fails no turn. A
second SIGTERM (or SIGINT) stops at once.

Installed from the app's lifespan, inside uvicorn's own signal handling, in each gateway
process (uvicorn's supervisor passes SIGTERM on to each of its workers)."""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

log = logging.getLogger(__name__)


@contextmanager
def lame_duck_on_sigterm(delay_s: float, on_draining: Callable[[], None]) -> Iterator[None]:
    """While open, the first SIGTERM calls ``on_draining`` and hands the signal to the
    handler it replaced (uvicorn's) ``delay_s`` later. Nothing is installed without a
    delay, without a handler to hand on to, or off the main thread (a test client)."""
    original = signal.getsignal(signal.SIGTERM)
    main = threading.current_thread() is threading.main_thread()
    if delay_s <= 0 or not callable(original) or not main:
        yield
        return
    loop = asyncio.get_running_loop()

    def first(sig: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, original)  # a second SIGTERM stops at once
        on_draining()
        log.warning("stopping in %.1f s: not ready meanwhile, serving as before", delay_s)
        loop.call_soon_threadsafe(loop.call_later, delay_s, original, sig, frame)

    signal.signal(signal.SIGTERM, first)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is first:
            signal.signal(signal.SIGTERM, original)
