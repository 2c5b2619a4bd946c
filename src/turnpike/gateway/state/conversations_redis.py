"""The conversation store in Redis: the optional shared tier, beside the response store.

Per conversation, scoped by tenant: one key for the conversation itself (JSON), one list
of its items (each as ``conversation_bounds.encode_item`` gives it), and the bytes they
hold, all expiring ``ttl_s`` after the last write. Appending is one script: it checks that
the conversation still exists (so a deleted one never grows back) and that the items fit
its bounds, so two replicas appending at once cannot both pass and cross them. Redis
trouble is ``StoreUnavailable`` (a 503), never a crash.
"""

from __future__ import annotations

import json

from redis import asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from turnpike.gateway.protocol.items import Item
from turnpike.gateway.state.conversation_bounds import (
    ConversationBounds,
    ConversationTooLarge,
    check_size,
    encode_item,
)
from turnpike.gateway.state.conversations import StoredConversation
from turnpike.gateway.state.responses_redis import _unavailable

# KEYS: the conversation, its items, their bytes. ARGV: ttl, max items, max bytes, how
# many of the last items are exempt from them, then the items. {-1} when there is no
# conversation; {0, items, bytes} (what it would hold) when the items do not fit; {1} once
# added. Pushed in slices: unpack overflows Lua's stack past a few thousand values.
APPEND = """
if redis.call('exists', KEYS[1]) == 0 then return {-1} end
local size = tonumber(redis.call('get', KEYS[3]))
if size == nil then
  size = 0
  for _, item in ipairs(redis.call('lrange', KEYS[2], 0, -1)) do size = size + #item end
end
local last = #ARGV - tonumber(ARGV[4])
local count = redis.call('llen', KEYS[2]) + last - 4
for i = 5, last do size = size + #ARGV[i] end
if count > tonumber(ARGV[2]) or size > tonumber(ARGV[3]) then return {0, count, size} end
for i = last + 1, #ARGV do size = size + #ARGV[i] end
for i = 5, #ARGV, 1000 do
  redis.call('rpush', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('set', KEYS[3], size, 'EX', ARGV[1])
redis.call('expire', KEYS[1], ARGV[1])
redis.call('expire', KEYS[2], ARGV[1])
return {1}
"""
# KEYS: the conversation, its items, their bytes. ARGV: ttl, the conversation's JSON.
UPDATE = """
if redis.call('exists', KEYS[1]) == 0 then return -1 end
redis.call('set', KEYS[1], ARGV[2], 'EX', ARGV[1])
redis.call('expire', KEYS[2], ARGV[1])
redis.call('expire', KEYS[3], ARGV[1])
return 1
"""
# KEYS: the items, their bytes. ARGV: the stored item. 1 when it was there.
DELETE_ITEM = """
if redis.call('lrem', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
if redis.call('exists', KEYS[2]) == 1 then redis.call('decrby', KEYS[2], #ARGV[1]) end
return 1
"""


def _dump(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


class RedisConversationStore:
    def __init__(
        self,
        url: str,
        ttl_s: int,
        prefix: str = "turnpike:conversation",
        bounds: ConversationBounds | None = None,
    ) -> None:
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
        self.bounds = bounds or ConversationBounds()
        self._append = self._redis.register_script(APPEND)
        self._update = self._redis.register_script(UPDATE)
        self._delete_item = self._redis.register_script(DELETE_ITEM)

    def _keys(self, tenant: str, conversation_id: str) -> list[str]:
        key = f"{self._prefix}:{tenant}:{conversation_id}"
        return [key, key + ":items", key + ":bytes"]

    @staticmethod
    def _conversation_json(conversation: StoredConversation) -> str:
        return _dump({"created_at": conversation.created_at, "metadata": conversation.metadata})

    async def create(
        self, tenant: str, conversation: StoredConversation, items: list[Item]
    ) -> None:
        key, items_key, bytes_key = self._keys(tenant, conversation.id)
        encoded = [encode_item(item) for item in items]
        size = sum(map(len, encoded))
        check_size(self.bounds, len(encoded), size)
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.set(key, self._conversation_json(conversation), ex=self._ttl)
                pipe.delete(items_key)
                if encoded:
                    pipe.rpush(items_key, *encoded)
                    pipe.expire(items_key, self._ttl)
                pipe.set(bytes_key, size, ex=self._ttl)
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
        try:
            return bool(await self._redis.delete(*self._keys(tenant, conversation_id)))
        except RedisError as err:
            raise _unavailable("conversation delete", err) from None

    async def append(
        self, tenant: str, conversation_id: str, items: list[Item], exempt: int = 0
    ) -> bool:
        bounds = self.bounds
        try:
            outcome = await self._append(
                keys=self._keys(tenant, conversation_id),
                args=[
                    self._ttl,
                    bounds.max_items,
                    bounds.max_bytes,
                    min(exempt, len(items)),
                    *(encode_item(item) for item in items),
                ],
            )
        except RedisError as err:
            raise _unavailable("conversation append", err) from None
        if outcome[0] == 0:
            raise ConversationTooLarge(self.bounds, int(outcome[1]), int(outcome[2]))
        return outcome[0] == 1

    async def _read(self, tenant: str, conversation_id: str) -> list[bytes] | None:
        """The raw items, or None when there is no such conversation."""
        key, items_key, _ = self._keys(tenant, conversation_id)
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
                try:
                    removed = await self._delete_item(
                        keys=self._keys(tenant, conversation_id)[1:], args=[value]
                    )
                    return bool(removed)
                except RedisError as err:
                    raise _unavailable("conversation delete item", err) from None
        return False

    async def close(self) -> None:
        await self._redis.aclose()
