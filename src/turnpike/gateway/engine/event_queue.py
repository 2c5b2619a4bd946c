"""The event queue between a response's producer (generation) and its one consumer
(a transport), with delta coalescing.

The producer never waits. When the consumer falls behind (a slow socket, a fast model),
consecutive text or argument deltas of one item that are still waiting are merged into
the waiting event instead of queueing more: the client gets fewer, larger deltas, the
same text, and sequence numbers without gaps.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from turnpike.gateway.protocol.events import Event

DELTA_TYPES = frozenset(
    {
        "response.output_text.delta",
        "response.function_call_arguments.delta",
        "response.reasoning_text.delta",
    }
)


class ResponseEventQueue:
    def __init__(self, response_id: str) -> None:
        self.response_id = response_id
        self.final: dict[str, Any] | None = None
        self.coalesced = 0  # deltas merged into a waiting one
        self._events: deque[Event | None] = deque()
        self._ready = asyncio.Event()
        self._mergeable: Event | None = None  # the newest waiting delta
        # Also given every event as it is emitted (a background response's resume
        # buffer); its events are never merged afterwards.
        self.sink: Callable[[Event], object] | None = None
        # Set by the transport when its client went away before the end: the engine then
        # stops a foreground response's generation (a background one goes on).
        self.abandoned = asyncio.Event()

    def abandon(self) -> None:
        self.abandoned.set()

    def emit(self, event: Event) -> None:
        if self.sink is not None:
            self.sink(event)
        self._events.append(event)
        self._mergeable = event if event["type"] in DELTA_TYPES else None
        self._ready.set()

    def merge_delta(self, item_id: str | None, text: str) -> bool:
        """Append ``text`` to the newest waiting delta of ``item_id``, if there is one."""
        waiting = self._mergeable
        if waiting is None or self.sink is not None or waiting["item_id"] != item_id:
            return False
        waiting["delta"] += text
        self.coalesced += 1
        return True

    def has_ready(self) -> bool:
        """Whether another event waits already (the consumer may send them together)."""
        return bool(self._events) and self._events[0] is not None

    def close(self) -> None:
        self._events.append(None)
        self._mergeable = None
        self._ready.set()

    async def events(self) -> AsyncIterator[Event]:
        while True:
            while not self._events:
                self._ready.clear()
                await self._ready.wait()
            event = self._events.popleft()
            if event is self._mergeable:
                self._mergeable = None  # the consumer has it now: no more changes
            if event is None:
                return
            yield event
