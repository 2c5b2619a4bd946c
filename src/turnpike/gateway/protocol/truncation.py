"""``truncation: "auto"``: which input items to drop so a prompt fits the context window.
Pure: the caller renders each candidate and asks ``smallest_fit`` for the fewest drops.

Whole items are dropped, oldest first. System and developer messages are never
dropped (they hold the instructions the client gave for the whole conversation); a
function call and the outputs that answer it go together, so no output is left
without its call; the newest unit is always kept (there must be something to answer).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from turnpike.conversation.v1 import conversation_pb2

Item = conversation_pb2.Item
PINNED_ROLES = ("system", "developer")


@dataclass(frozen=True)
class Truncation:
    """A conversation's items grouped into droppable units, oldest first."""

    items: Sequence[Item]
    units: tuple[tuple[int, ...], ...]  # indices into ``items``; pinned items in none

    @property
    def max_drop(self) -> int:
        """How many units may go: all but the newest."""
        return max(0, len(self.units) - 1)

    def dropping(self, count: int) -> tuple[list[Item], list[str]]:
        """The items left after dropping the ``count`` oldest units, and the dropped
        items' ids (in order)."""
        gone = {i for unit in self.units[:count] for i in unit}
        kept = [item for i, item in enumerate(self.items) if i not in gone]
        return kept, [self.items[i].id for i in sorted(gone)]


def plan(items: Sequence[Item]) -> Truncation:
    units: list[list[int]] = []
    unit_of_call: dict[str, int] = {}  # call_id -> its unit's index in ``units``
    for i, item in enumerate(items):
        if item.kind == Item.MESSAGE and item.role in PINNED_ROLES:
            continue
        if item.kind == Item.FUNCTION_CALL_OUTPUT and item.call_id in unit_of_call:
            units[unit_of_call[item.call_id]].append(i)
            continue
        if item.kind == Item.FUNCTION_CALL:
            unit_of_call[item.call_id] = len(units)
        units.append([i])
    return Truncation(items, tuple(tuple(unit) for unit in units))


async def smallest_fit(high: int, fits: Callable[[int], Awaitable[bool]]) -> int | None:
    """The least ``n`` in 1..``high`` for which ``fits(n)`` holds (fits grows with n:
    dropping more never makes a prompt longer), or None. Binary search: a few renders."""
    low, found = 1, None
    while low <= high:
        mid = (low + high) // 2
        if await fits(mid):
            found, high = mid, mid - 1
        else:
            low = mid + 1
    return found
