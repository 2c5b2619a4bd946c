"""The conversation store (``/v1/conversations``): what a store of conversations offers
(``ConversationStore``), and its in-process implementation, bounded.

A conversation is its metadata and an ordered list of canonical items (``turnpike.gateway.protocol.items``),
each with its own id. ``RedisConversationStore`` (``conversation_store_redis``) is the
shared tier. Every operation is scoped by tenant: another tenant's id finds nothing,
exactly like an id that never existed. A store that cannot answer raises
``StoreUnavailable``. Each conversation is bounded in items and bytes
(``turnpike.gateway.state.conversation_bounds``): a create or append past them raises
``ConversationTooLarge`` and changes nothing.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Protocol

from turnpike.gateway.protocol.items import Item
from turnpike.gateway.state.conversation_bounds import ConversationBounds, check_size, item_bytes
from turnpike.ids import new_id


@dataclass
class StoredConversation:
    id: str
    created_at: int
    metadata: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": dict(self.metadata),
        }


def new_conversation(metadata: dict[str, str]) -> StoredConversation:
    return StoredConversation(new_id("conv"), int(time.time()), dict(metadata))


class ConversationStore(Protocol):
    bounds: ConversationBounds

    async def create(
        self, tenant: str, conversation: StoredConversation, items: list[Item]
    ) -> None:
        """Store a new conversation with its first items (ConversationTooLarge when they
        are past the bounds)."""

    async def get(self, tenant: str, conversation_id: str) -> StoredConversation | None:
        """The tenant's conversation, or None."""

    async def update(
        self, tenant: str, conversation_id: str, metadata: dict[str, str]
    ) -> StoredConversation | None:
        """Replace the metadata; the conversation, or None when there is none."""

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        """Whether there was such a conversation to delete (its items go with it)."""

    async def append(
        self, tenant: str, conversation_id: str, items: list[Item], exempt: int = 0
    ) -> bool:
        """Add items at the end; False when there is no such conversation. All or none:
        ConversationTooLarge (nothing added) when they would take it past the bounds,
        not counting the last ``exempt`` items (a turn's output, which may go past:
        ``turnpike.gateway.state.conversation_bounds``)."""

    async def items(self, tenant: str, conversation_id: str) -> list[Item] | None:
        """Every item, oldest first; None when there is no such conversation."""

    async def delete_item(self, tenant: str, conversation_id: str, item_id: str) -> bool | None:
        """Whether the item was there; None when there is no such conversation."""

    async def close(self) -> None:
        """Release connections (at shutdown)."""


@dataclass
class _Entry:
    conversation: StoredConversation
    items: list[Item]
    size: int  # bytes of its items (item_bytes)


class InMemoryConversationStore:
    """In process. Bounded by conversations and by the items they hold together: past
    either bound the least recently used conversations leave first (never the one just
    written, even alone over the bound). Each conversation within ``bounds``."""

    def __init__(
        self,
        max_conversations: int,
        max_items: int = 1_000_000,
        bounds: ConversationBounds | None = None,
    ) -> None:
        if max_conversations < 1:
            raise ValueError("the conversation store needs room for at least one conversation")
        self._entries: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._max_conversations = max_conversations
        self._max_items = max_items
        self._total_items = 0
        self.bounds = bounds or ConversationBounds()

    def _use(self, tenant: str, conversation_id: str) -> _Entry | None:
        key = (tenant, conversation_id)
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def _evict(self) -> None:
        entries = self._entries
        while len(entries) > 1 and (
            len(entries) > self._max_conversations or self._total_items > self._max_items
        ):
            _, oldest = entries.popitem(last=False)
            self._total_items -= len(oldest.items)

    async def create(
        self, tenant: str, conversation: StoredConversation, items: list[Item]
    ) -> None:
        size = sum(item_bytes(i) for i in items)
        check_size(self.bounds, len(items), size)
        old = self._entries.pop((tenant, conversation.id), None)
        if old is not None:
            self._total_items -= len(old.items)
        self._entries[(tenant, conversation.id)] = _Entry(
            _copy(conversation), [dict(i) for i in items], size
        )
        self._total_items += len(items)
        self._evict()

    async def get(self, tenant: str, conversation_id: str) -> StoredConversation | None:
        entry = self._use(tenant, conversation_id)
        return None if entry is None else _copy(entry.conversation)

    async def update(
        self, tenant: str, conversation_id: str, metadata: dict[str, str]
    ) -> StoredConversation | None:
        entry = self._use(tenant, conversation_id)
        if entry is None:
            return None
        entry.conversation.metadata = dict(metadata)
        return _copy(entry.conversation)

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        entry = self._entries.pop((tenant, conversation_id), None)
        if entry is None:
            return False
        self._total_items -= len(entry.items)
        return True

    async def append(
        self, tenant: str, conversation_id: str, items: list[Item], exempt: int = 0
    ) -> bool:
        entry = self._use(tenant, conversation_id)
        if entry is None:
            return False
        sizes = [item_bytes(i) for i in items]
        bounded = len(items) - min(exempt, len(items))
        check_size(self.bounds, len(entry.items) + bounded, entry.size + sum(sizes[:bounded]))
        entry.items.extend(dict(i) for i in items)
        entry.size += sum(sizes)
        self._total_items += len(items)
        self._evict()
        return True

    async def items(self, tenant: str, conversation_id: str) -> list[Item] | None:
        entry = self._use(tenant, conversation_id)
        return None if entry is None else list(entry.items)

    async def delete_item(self, tenant: str, conversation_id: str, item_id: str) -> bool | None:
        entry = self._use(tenant, conversation_id)
        if entry is None:
            return None
        for i, item in enumerate(entry.items):
            if item.get("id") == item_id:
                del entry.items[i]
                entry.size -= item_bytes(item)
                self._total_items -= 1
                return True
        return False

    async def close(self) -> None:
        """Nothing to release."""


def _copy(conversation: StoredConversation) -> StoredConversation:
    return StoredConversation(conversation.id, conversation.created_at, dict(conversation.metadata))
