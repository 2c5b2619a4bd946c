"""Background responses (``background: true``): those in flight in this process, so that
they can be cancelled, and their events, so that a dropped stream can be resumed (kept in
Redis too when it is configured, so any replica can replay and cancel them)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from turnpike.gateway.engine.event_queue import ResponseEventQueue
from turnpike.gateway.protocol.events import Event
from turnpike.gateway.state.event_buffer import EventBuffer

if TYPE_CHECKING:
    from turnpike.gateway.state.background_redis import SharedBackground

T = TypeVar("T")


@dataclass
class Running:
    """A background response in flight in this process."""

    generation: asyncio.Task[Any] | None = None
    cancel_requested: bool = False
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    final: dict[str, Any] | None = None


class BackgroundResponses:
    def __init__(self) -> None:
        self.buffer = EventBuffer()
        self._running: dict[tuple[str, str], Running] = {}
        # The same across replicas, in Redis when it is configured (wiring sets it).
        self.shared: SharedBackground | None = None

    def track(self, tenant: str, response_id: str, queue: ResponseEventQueue) -> None:
        """From now on, ``queue``'s events are kept for resuming, and the response can
        be cancelled."""
        self._running[(tenant, response_id)] = Running()
        local = self.buffer.open(tenant, response_id).append
        if self.shared is None:
            queue.sink = local
        else:
            shared = self.shared.recorder(tenant, response_id)
            queue.sink = lambda event: (local(event), shared(event))

    def keep(self, tenant: str, response_id: str, sent: Iterable[Event]) -> Callable[[Event], None]:
        """A stored response whose WebSocket dropped goes on without its client: what it
        sent so far, then each later event given to the returned sink, is kept as a
        background response's is, so GET ?stream=true resumes it here or (with Redis)
        on any replica."""
        sinks: list[Callable[[Event], object]] = [self.buffer.open(tenant, response_id).append]
        if self.shared is not None:
            sinks.append(self.shared.recorder(tenant, response_id))

        def record(event: Event) -> None:
            plain = {k: v for k, v in event.items() if k != "stream_id"}  # lanes are the socket's
            for sink in sinks:
                sink(plain)

        for event in sent:
            record(event)
        return record

    def running(self, tenant: str, response_id: str) -> Running | None:
        return self._running.get((tenant, response_id))

    @staticmethod
    async def generate(running: Running, generate: Coroutine[Any, Any, T]) -> T | None:
        """Run a background response's generation in a task of its own, which ``cancel``
        stops (the worker's stream is cancelled with it); None once cancelled."""
        if running.cancel_requested:
            generate.close()
            return None
        running.generation = asyncio.create_task(generate)
        try:
            return await asyncio.shield(running.generation)
        except asyncio.CancelledError:
            if not running.cancel_requested:  # not ours: shutting down
                running.generation.cancel()
                raise
            return None

    def finished(self, tenant: str, response_id: str, response: dict[str, Any]) -> None:
        running = self._running.pop((tenant, response_id), None)
        if running is not None:
            running.final = response
            running.finished.set()

    async def cancel(self, tenant: str, response_id: str) -> dict[str, Any] | None:
        """Cancel the tenant's background response if it is in flight in this process,
        and give it once it has finished (``cancelled``, or what it reached first);
        None when this process does not run it."""
        running = self._running.get((tenant, response_id))
        if running is None:
            return None
        self.request_cancel(running)
        await running.finished.wait()
        return running.final

    @staticmethod
    def request_cancel(running: Running) -> None:
        """Stop the generation (its worker stream with it); the response ends cancelled."""
        running.cancel_requested = True
        if running.generation is not None:
            running.generation.cancel()
