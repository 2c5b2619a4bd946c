"""Group commit, as databases do it: one durable write for everything that is waiting.

While one write (a transaction and its fsync) is in flight, new submissions wait; when it
finishes, all of them go into the next write together. Nothing is held back on purpose:
a submission into an idle committer is written at once, alone, and under load the groups
grow by themselves to what arrived during one write. A submitter is answered only when the
write that holds its items has finished, so an acknowledgement never precedes its commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class GroupCommit(Generic[T, R]):
    """Batches ``submit`` calls into calls of ``write``, one at a time and in arrival order.

    ``write`` takes the items of every waiting submission, concatenated, and returns one
    result per item in the same order (or raises: every submission of that group gets the
    error). Single event loop; ``write`` itself may run anywhere (a database thread)."""

    def __init__(self, write: Callable[[list[T]], Awaitable[list[R]]]) -> None:
        self._write = write
        self._waiting: list[tuple[Sequence[T], asyncio.Future[list[R]]]] = []
        self._writer: asyncio.Task[None] | None = None
        self._closed = False

    async def submit(self, items: Sequence[T]) -> list[R]:
        """Write ``items`` in the next group; their results once that write has finished.
        The items of one submission always share one write."""
        if self._closed:
            raise RuntimeError("group commit is closed")
        future: asyncio.Future[list[R]] = asyncio.get_running_loop().create_future()
        self._waiting.append((items, future))
        if self._writer is None:
            self._writer = asyncio.create_task(self._write_groups(), name="group commit")
        # A cancelled submitter stops waiting; its items are still written (their group
        # may already be in flight), which an idempotent write makes harmless.
        return await future

    async def _write_groups(self) -> None:
        try:
            while self._waiting:
                group, self._waiting = self._waiting, []
                await self._write_group(group)
        finally:
            self._writer = None
            for _, future in self._waiting:  # only when cancelled: nobody will write them
                future.cancel()
            self._waiting = []

    async def _write_group(self, group: list[tuple[Sequence[T], asyncio.Future[list[R]]]]) -> None:
        items = [item for submitted, _ in group for item in submitted]
        try:
            results = await self._write(items)
            if len(results) != len(items):
                raise RuntimeError(f"write returned {len(results)} results for {len(items)}")
        except asyncio.CancelledError:
            for _, future in group:
                future.cancel()
            raise
        except Exception as exc:
            for _, future in group:
                if not future.done():
                    future.set_exception(exc)
            return
        start = 0
        for submitted, future in group:
            if not future.done():
                future.set_result(results[start : start + len(submitted)])
            start += len(submitted)

    async def close(self) -> None:
        """Refuse new submissions and wait until every accepted one is written."""
        self._closed = True
        if self._writer is not None:
            await asyncio.shield(self._writer)
