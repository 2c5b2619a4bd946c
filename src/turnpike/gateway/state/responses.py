"""The response store: what a store of responses offers (``ResponseStore``), and what
is built on top of any store (a conversation's chain, its history).

Two implementations: ``InMemoryResponseStore`` (in process, bounded; the embedded
default) and ``RedisResponseStore`` (the optional shared tier). Every lookup is scoped
by tenant: another tenant's id finds nothing, exactly like an id that never existed. A
store that cannot answer raises ``StoreUnavailable``; the transports tell the client.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from turnpike.gateway.protocol.items import Item


class StoreUnavailable(Exception):
    """The store could not be reached or did not answer; the request may be retried."""


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


class ResponseStore(Protocol):
    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        """The tenant's response, or None."""

    async def put(self, record: StoredResponse) -> None:
        """Store (or replace) a response; later changes by the caller do not reach it."""

    async def delete(self, tenant: str, response_id: str) -> bool:
        """Whether there was such a response to delete."""

    async def ping(self) -> bool:
        """Whether the store answers (readiness)."""

    async def close(self) -> None:
        """Release connections (at shutdown)."""


async def load_chain(
    store: ResponseStore, tenant: str, response_id: str
) -> list[StoredResponse] | None:
    """The stored responses from the first of a conversation to ``response_id``, or None
    when any link is missing (never stored, deleted, expired, another tenant's)."""
    chain: list[StoredResponse] = []
    seen: set[str] = set()
    current: str | None = response_id
    while current is not None:
        if current in seen:
            return None
        seen.add(current)
        record = await store.get(tenant, current)
        if record is None:
            return None
        chain.append(record)
        current = record.previous_response_id
    chain.reverse()
    return chain


def history_of(chain: list[StoredResponse]) -> list[Item]:
    """Every item of a chain, in conversation order: each response's input, then its output."""
    items: list[Item] = []
    for record in chain:
        items.extend(record.input_items)
        items.extend(record.response["output"])
    return items
