"""Background responses across gateway replicas, through Redis (when it is configured).

- Each background response's events also go to a capped Redis list (its newest
  ``max_events``, expiring ``ttl_s`` after the last one), so any replica can replay a
  stream (``GET /v1/responses/{id}?stream=true&starting_after=N``) and follow it live by
  polling the list.
- A cancel that reaches a replica which does not run the response is published on a
  channel that every replica listens to; the one that runs it cancels it.

Redis trouble never fails a response: a write that fails is logged and dropped (a resume
from another replica may then miss events, and is refused as out of range).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from redis import asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from turnpike.gateway.protocol.events import Event
from turnpike.gateway.protocol.json_codec import dump_bytes
from turnpike.gateway.state.event_buffer import TERMINAL_TYPES, BufferedEvents

log = logging.getLogger(__name__)

# How often a replica that does not run a response looks for its new events.
FOLLOW_POLL_S = 0.1
# How long a follower waits for a new event before it gives up on the response.
FOLLOW_IDLE_S = 300.0
# The cancel channel is read in waits this long at most (an idle channel costs a timer).
LISTEN_WAIT_S = 5.0


class SharedBackground:
    def __init__(
        self, url: str, ttl_s: int, max_events: int, prefix: str = "turnpike:background"
    ) -> None:
        self._redis = aioredis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
        self._url = url
        self._ttl = ttl_s
        self.max_events = max_events
        self._prefix = prefix
        self._pending: dict[tuple[str, str], list[bytes]] = {}
        self._writers: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._listener: asyncio.Task[None] | None = None

    def _events_key(self, tenant: str, response_id: str) -> str:
        return f"{self._prefix}:events:{tenant}:{response_id}"

    @property
    def _channel(self) -> str:
        return f"{self._prefix}:cancel"

    # Events ----------------------------------------------------------------
    def recorder(self, tenant: str, response_id: str) -> Callable[[Event], None]:
        """A sink for the response's events: they reach Redis in order, in batches."""
        key = (tenant, response_id)

        def record(event: Event) -> None:
            self._pending.setdefault(key, []).append(dump_bytes(event))
            if key not in self._writers:
                self._writers[key] = asyncio.create_task(self._write(key))

        return record

    async def _write(self, key: tuple[str, str]) -> None:
        name = self._events_key(*key)
        try:
            while batch := self._pending.pop(key, None):
                try:
                    async with self._redis.pipeline(transaction=False) as pipe:
                        pipe.rpush(name, *batch)
                        pipe.ltrim(name, -self.max_events, -1)
                        pipe.expire(name, self._ttl)
                        await pipe.execute()
                except RedisError as err:
                    log.warning("redis: keeping the events of %s failed: %s", key[1], err)
        finally:
            del self._writers[key]

    async def events(self, tenant: str, response_id: str) -> BufferedEvents | None:
        """What Redis holds of the response's events, or None (none kept, or Redis down)."""
        try:
            raw = await self._redis.lrange(self._events_key(tenant, response_id), 0, -1)
        except RedisError as err:
            log.warning("redis: reading the events of %s failed: %s", response_id, err)
            return None
        if not raw:
            return None
        events = BufferedEvents(self.max_events)
        for item in raw:
            events.append(json.loads(item))
        return events

    async def follow(
        self, tenant: str, response_id: str, first: BufferedEvents, starting_after: int
    ) -> AsyncIterator[Event]:
        """The events after ``starting_after`` from ``first`` (what ``events`` gave), then
        the newer ones as Redis gets them, until the terminal event."""
        after, snapshot, idle = starting_after, first, 0.0
        while True:
            fresh = [e for e in snapshot.events if e["sequence_number"] > after]
            if fresh and fresh[0]["sequence_number"] != after + 1:
                return  # dropped from the capped list meanwhile
            for event in fresh:
                after = event["sequence_number"]
                yield event
                if event["type"] in TERMINAL_TYPES:
                    return
            idle = 0.0 if fresh else idle + FOLLOW_POLL_S
            if idle > FOLLOW_IDLE_S:
                return
            await asyncio.sleep(FOLLOW_POLL_S)
            newer = await self.events(tenant, response_id)
            if newer is None:
                return
            snapshot = newer

    # Cancellation ----------------------------------------------------------
    async def request_cancel(self, tenant: str, response_id: str) -> None:
        await self._redis.publish(self._channel, f"{tenant}\n{response_id}")

    def listen(self, on_cancel: Callable[[str, str], Coroutine[Any, Any, object]]) -> None:
        """Call ``on_cancel(tenant, response_id)`` for every cancel any replica publishes."""
        self._listener = asyncio.create_task(self._listen(on_cancel))

    async def _listen(self, on_cancel: Callable[[str, str], Coroutine[Any, Any, object]]) -> None:
        """Not ``pubsub.listen()``: when the connection dies of a timeout (its TCP
        keepalive gives up on a Redis cut off the network, 45 s after the last traffic),
        the socket's error is a TimeoutError, which redis-py's read takes for "no message
        yet" (in Python 3.11 it is asyncio's TimeoutError too) and returns None; the
        next read fails at once the same way. ``listen()`` looped on that without ever
        yielding: the event loop stalled (no request served, health checks failing) and
        the error's traceback grew until the container's memory limit killed the
        gateway. Here a wait that ends at once with nothing is a dead connection: it
        is closed, and the channel subscribed again on a new one."""
        tasks: set[asyncio.Task[object]] = set()
        loop = asyncio.get_running_loop()
        while True:
            # A connection of its own, without a read timeout: it waits for messages.
            client = aioredis.from_url(self._url, socket_connect_timeout=2)
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(self._channel)
                    while True:
                        began = loop.time()
                        message = await pubsub.get_message(timeout=LISTEN_WAIT_S)
                        if message is None:
                            if loop.time() - began < LISTEN_WAIT_S / 2:
                                raise RedisConnectionError("the connection failed")
                            continue
                        if message["type"] != "message":
                            continue
                        tenant, _, response_id = message["data"].decode().partition("\n")
                        task = asyncio.create_task(on_cancel(tenant, response_id))
                        tasks.add(task)
                        task.add_done_callback(tasks.discard)
            except (RedisError, OSError) as err:
                log.warning("redis: the cancel channel failed (%s); resubscribing in 1 s", err)
                await asyncio.sleep(1)
            finally:
                await client.aclose()

    async def close(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
        if self._writers:
            await asyncio.wait(list(self._writers.values()), timeout=5)
        await self._redis.aclose()
