"""The conversation store in Redis: the optional shared tier, beside the response store.

Per conversation, scoped by tenant: one key for the conversation itself (JSON) and one
list of its items (JSON each), both expiring ``ttl_s`` after the last write. Appending
checks, in the same script, that the conversation still exists, so a deleted one never
grows back. Redis trouble is ``StoreUnavailable`` (a 503), never a crash.
"""

from __future__ import annotations

import json

from redis import asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from gateway.conversation_store import StoredConversation
from gateway.items import Item
from gateway.store_redis import _unavailable

# KEYS: the conversation, its items. ARGV: ttl, then the items. -1 when there is none.
APPEND = """
if redis.call('exists', KEYS[1]) == 0 then return -1 end
if #ARGV > 1 then redis.call('rpush', KEYS[2], unpack(ARGV, 2)) end
redis.call('expire', KEYS[1], ARGV[1])
redis.call('expire', KEYS[2], ARGV[1])
return 1
"""
# KEYS: the conversation, its items. ARGV: ttl, the conversation's JSON.
UPDATE = """
if redis.call('exists', KEYS[1]) == 0 then return -1 end
redis.call('set', KEYS[1], ARGV[2], 'EX', ARGV[1])
redis.call('expire', KEYS[2], ARGV[1])
return 1
"""


def _dump(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


class RedisConversationStore:
    def __init__(self, url: str, ttl_s: int, prefix: str = "turnpike:conversation") -> None:
        # One retry, at once, on a connection that broke (a pooled one Redis dropped when it
        # restarted); the operations are idempotent. Not on a timeout: that bound holds.
        self._redis = aioredis.from_url(
            url,
            socket_timeout=5,
            socket_connect_timeout=2,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        )
        self._ttl = ttl_s
        self._prefix = prefix
        self._append = self._redis.register_script(APPEND)
        self._update = self._redis.register_script(UPDATE)

    def _keys(self, tenant: str, conversation_id: str) -> list[str]:
        key = f"{self._prefix}:{tenant}:{conversation_id}"
        return [key, key + ":items"]

    @staticmethod
    def _conversation_json(conversation: StoredConversation) -> str:
        return _dump({"created_at": conversation.created_at, "metadata": conversation.metadata})

    async def create(
        self, tenant: str, conversation: StoredConversation, items: list[Item]
    ) -> None:
        key, items_key = self._keys(tenant, conversation.id)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(key, self._conversation_json(conversation), ex=self._ttl)
                pipe.delete(items_key)
                if items:
                    pipe.rpush(items_key, *(_dump(item) for item in items))
                    pipe.expire(items_key, self._ttl)
                await pipe.execute()
        except RedisError as err:
            raise _unavailable("conversation create", err) from None

    async def get(self, tenant: str, conversation_id: str) -> StoredConversation | None:
        try:
            raw = await self._redis.get(self._keys(tenant, conversation_id)[0])
        except RedisError as err:
            raise _unavailable("conversation get", err) from None
        if raw is None:
            return None
        data = json.loads(raw)
        return StoredConversation(conversation_id, data["created_at"], data["metadata"])

    async def update(
        self, tenant: str, conversation_id: str, metadata: dict[str, str]
    ) -> StoredConversation | None:
        current = await self.get(tenant, conversation_id)
        if current is None:
            return None
        current.metadata = dict(metadata)
        try:
            found = await self._update(
                keys=self._keys(tenant, conversation_id),
                args=[self._ttl, self._conversation_json(current)],
            )
        except RedisError as err:
            raise _unavailable("conversation update", err) from None
        return current if found == 1 else None

    async def delete(self, tenant: str, conversation_id: str) -> bool:
        key, items_key = self._keys(tenant, conversation_id)
        try:
            return bool(await self._redis.delete(key, items_key))
        except RedisError as err:
            raise _unavailable("conversation delete", err) from None

    async def append(self, tenant: str, conversation_id: str, items: list[Item]) -> bool:
        try:
            found = await self._append(
                keys=self._keys(tenant, conversation_id),
                args=[self._ttl, *(_dump(item) for item in items)],
            )
        except RedisError as err:
            raise _unavailable("conversation append", err) from None
        return found == 1

    async def _read(self, tenant: str, conversation_id: str) -> list[bytes] | None:
        """The raw items, or None when there is no such conversation."""
        key, items_key = self._keys(tenant, conversation_id)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.exists(key)
                pipe.lrange(items_key, 0, -1)
                exists, raw = await pipe.execute()
        except RedisError as err:
            raise _unavailable("conversation items", err) from None
        return raw if exists else None

    async def items(self, tenant: str, conversation_id: str) -> list[Item] | None:
        raw = await self._read(tenant, conversation_id)
        return None if raw is None else [json.loads(value) for value in raw]

    async def delete_item(self, tenant: str, conversation_id: str, item_id: str) -> bool | None:
        raw = await self._read(tenant, conversation_id)
        if raw is None:
            return None
        for value in raw:
            if json.loads(value).get("id") == item_id:
                items_key = self._keys(tenant, conversation_id)[1]
                try:
                    return bool(await self._redis.lrem(items_key, 1, value))
                except RedisError as err:
                    raise _unavailable("conversation delete item", err) from None
        return False

    async def close(self) -> None:
        await self._redis.aclose()
