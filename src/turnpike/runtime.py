"""How every Turnpike process runs: its event loop and its garbage collector.

The event loop is uvloop's (libuv), for the services as for the gateway (uvicorn picks
it when it is installed): it wakes and runs callbacks for less CPU than the standard
loop, and a gRPC service wakes its loop for every message (an empty round trip between
two processes costs about 15% less CPU on it: ``python -m bench.load.machine_unit``).

The collector: a process holds long-lived objects from its start (modules, the
tokenizer's vocabulary, the safety model), and CPython's full collections walk all of
them. ``tune_gc`` moves what start-up built out of their reach (``gc.freeze``).
"""

from __future__ import annotations

import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")


def tune_gc() -> None:
    """Collect once and freeze what exists now (call it when start-up is done)."""
    gc.collect()
    gc.freeze()


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a process's main coroutine on uvloop."""
    return uvloop.run(main)
