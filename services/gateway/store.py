"""The response store: every stored response, scoped by tenant.

In memory and bounded (oldest first out) for the embedded default; the
interface is async so a shared tier (Redis) can stand behind it. A lookup
with another tenant's id finds nothing, exactly like an id that never existed.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from gateway.items import Item


@dataclass
class StoredResponse:
    tenant: str
    response: dict[str, Any]
    # The items this request added (not the inherited history).
    input_items: list[Item] = field(default_factory=list)
    # The conversation's routing key (internal; never returned).
    affinity_key: str = ""

    @property
    def id(self) -> str:
        return self.response["id"]

    @property
    def previous_response_id(self) -> str | None:
        return self.response.get("previous_response_id")


class ChainWalk:
    """What every store offers on top of ``get``: a conversation's chain."""

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        raise NotImplementedError

    async def chain(self, tenant: str, response_id: str) -> list[StoredResponse] | None:
        """The stored responses from the first of the chain to ``response_id``,
        or None when any link is missing."""
        chain: list[StoredResponse] = []
        seen: set[str] = set()
        current: str | None = response_id
        while current is not None:
            if current in seen:
                return None
            seen.add(current)
            record = await self.get(tenant, current)
            if record is None:
                return None
            chain.append(record)
            current = record.previous_response_id
        chain.reverse()
        return chain


class ResponseStore(ChainWalk):
    """In process, bounded: the embedded default."""

    def __init__(self, max_responses: int) -> None:
        self._max = max_responses
        self._records: OrderedDict[tuple[str, str], StoredResponse] = OrderedDict()

    async def put(self, record: StoredResponse) -> None:
        key = (record.tenant, record.id)
        # Copies, so later changes by the caller never leak into what GET returns. The
        # engine reassigns top-level keys and fills ``output`` in place; what came from
        # the request (tools, text, metadata) is never changed in place, as for events
        # (response_object.snapshot).
        self._records[key] = StoredResponse(
            record.tenant,
            {**record.response, "output": copy.deepcopy(record.response["output"])},
            list(record.input_items),
            record.affinity_key,
        )
        self._records.move_to_end(key)
        while len(self._records) > self._max:
            self._records.popitem(last=False)

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        return self._records.get((tenant, response_id))

    async def delete(self, tenant: str, response_id: str) -> bool:
        return self._records.pop((tenant, response_id), None) is not None


def history_of(chain: list[StoredResponse]) -> list[Item]:
    """Every item of a chain, in conversation order: each response's input, then its output."""
    items: list[Item] = []
    for record in chain:
        items.extend(record.input_items)
        items.extend(record.response["output"])
    return items
