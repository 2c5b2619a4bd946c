"""The events of background responses, kept so that a client can resume a stream after a
disconnect (``GET /v1/responses/{id}?stream=true&starting_after=N``).

Bounded twice: each response keeps its newest ``max_events`` events, and the buffer keeps
its newest ``max_responses`` responses (the oldest started leaves first). A reader gets the
events after a sequence number, then follows the live ones until the terminal event. Pure
asyncio, no I/O.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, deque
from collections.abc import AsyncIterator

from turnpike.gateway.protocol.errors import ApiError, invalid
from turnpike.gateway.protocol.events import Event

TERMINAL_TYPES = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "response.cancelled"}
)


class BufferedEvents:
    """One response's events, newest ``max_events`` kept."""

    def __init__(self, max_events: int) -> None:
        self.events: deque[Event] = deque(maxlen=max_events)
        self.done = False
        self._changed = asyncio.Event()

    def append(self, event: Event) -> None:
        self.events.append(event)
        if event["type"] in TERMINAL_TYPES:
            self.done = True
        self._changed.set()

    def close(self) -> None:
        self.done = True
        self._changed.set()

    def check(self, starting_after: int) -> None:
        """Raise ApiError(400) when the events after ``starting_after`` cannot be replayed."""
        if not self.events:
            return
        first, last = self.events[0]["sequence_number"], self.events[-1]["sequence_number"]
        if starting_after < first - 1:
            raise _bad_cursor(
                f"Invalid 'starting_after': the events before sequence number {first} are no "
                "longer kept for this response."
            )
        if self.done and starting_after > last:
            raise _bad_cursor(
                f"Invalid 'starting_after': the response's last event has sequence number {last}."
            )

    async def follow(self, starting_after: int) -> AsyncIterator[Event]:
        """The events after ``starting_after``, then the live ones until the terminal event."""
        self.check(starting_after)
        after = starting_after
        while True:
            self._changed.clear()
            fresh = [e for e in self.events if e["sequence_number"] > after]
            if fresh and fresh[0]["sequence_number"] != after + 1:
                # Dropped while the reader waited: it cannot get a contiguous stream.
                return
            for event in fresh:
                after = event["sequence_number"]
                yield event
                if event["type"] in TERMINAL_TYPES:
                    return
            if self.done and not fresh:
                return
            if not fresh:
                await self._changed.wait()


class EventBuffer:
    """The buffered events of background responses, by tenant and response id."""

    def __init__(self, max_responses: int = 1024, max_events: int = 4096) -> None:
        self.max_responses = max_responses
        self.max_events = max_events
        self._responses: OrderedDict[tuple[str, str], BufferedEvents] = OrderedDict()

    def open(self, tenant: str, response_id: str) -> BufferedEvents:
        key = (tenant, response_id)
        events = self._responses.get(key)
        if events is None:
            events = self._responses[key] = BufferedEvents(self.max_events)
            while len(self._responses) > self.max_responses:
                _, dropped = self._responses.popitem(last=False)
                dropped.close()
        return events

    def get(self, tenant: str, response_id: str) -> BufferedEvents | None:
        return self._responses.get((tenant, response_id))

    def __len__(self) -> int:
        return len(self._responses)


def _bad_cursor(message: str) -> ApiError:
    return invalid(message, "starting_after", "invalid_value")
