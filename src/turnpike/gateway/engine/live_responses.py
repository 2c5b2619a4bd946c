"""Every response in flight in this process, so that deleting one stops it and nothing
stores it again: a response deleted while it ran used to come back, completed, when it
finished (issue 19). Background ones are also in ``turnpike.gateway.engine.background``, which cancels
them; a foreground one stops as when its client leaves (its queue is abandoned)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from turnpike.gateway.engine.event_queue import ResponseEventQueue


@dataclass
class Live:
    queue: ResponseEventQueue
    stored: bool  # the request's ``store``: only a stored response can be deleted
    deleted: bool = False  # set by DELETE: the engine stores and caches it no more
    finished: asyncio.Event = field(default_factory=asyncio.Event)


class LiveResponses:
    def __init__(self) -> None:
        self._live: dict[tuple[str, str], Live] = {}

    def add(self, tenant: str, response_id: str, queue: ResponseEventQueue, stored: bool) -> Live:
        live = self._live[(tenant, response_id)] = Live(queue, stored)
        return live

    def get(self, tenant: str, response_id: str) -> Live | None:
        return self._live.get((tenant, response_id))

    def finished(self, tenant: str, response_id: str) -> None:
        live = self._live.pop((tenant, response_id), None)
        if live is not None:
            live.finished.set()

    def mark_deleted(self, tenant: str, response_id: str) -> bool:
        """Whether a stored response of the tenant runs here; it is deleted from now on."""
        live = self.get(tenant, response_id)
        if live is None or not live.stored:
            return False
        live.deleted = True
        return True

    def is_deleted(self, tenant: str, response_id: str) -> bool:
        live = self.get(tenant, response_id)
        return live is not None and live.deleted
