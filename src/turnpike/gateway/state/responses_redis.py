"""The response store in Redis: the optional shared tier.

Every gateway replica sees every stored response, so an HTTP follow-up may land on
any replica. One key per response, scoped by tenant, JSON, expiring after
``ttl_s``. Redis trouble is ``StoreUnavailable`` for the request that needed it (a 503
for the client), never a crash.

A delete leaves a tombstone beside the key (expiring as the response would have), and a
put never writes over one: a response deleted on one replica while another still runs
it is not stored again when it finishes there. Both are scripts, so no put can fall
between a delete's two writes.
"""

from __future__ import annotations

import json
import logging

from redis import asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from turnpike.gateway.state.responses import StoredResponse, StoreUnavailable

log = logging.getLogger(__name__)

# KEYS: the response, its tombstone; ARGV: the value, the TTL. 1 when stored.
PUT = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
return 1
"""
# KEYS: the response, its tombstone; ARGV: the TTL. 1 when there was a response.
DELETE = """
if redis.call('DEL', KEYS[1]) == 0 then return 0 end
redis.call('SET', KEYS[2], '1', 'EX', ARGV[1])
return 1
"""


class RedisResponseStore:
    def __init__(self, url: str, ttl_s: int, prefix: str = "turnpike:response") -> None:
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
        self._put = self._redis.register_script(PUT)
        self._delete = self._redis.register_script(DELETE)

    def _key(self, tenant: str, response_id: str) -> str:
        return f"{self._prefix}:{tenant}:{response_id}"

    def _keys(self, tenant: str, response_id: str) -> list[str]:
        key = self._key(tenant, response_id)
        return [key, f"{key}:deleted"]

    async def put(self, record: StoredResponse) -> None:
        value = json.dumps(
            {
                "response": record.response,
                "input_items": record.input_items,
                "affinity_key": record.affinity_key,
            },
            separators=(",", ":"),
        )
        try:
            await self._put(keys=self._keys(record.tenant, record.id), args=[value, self._ttl])
        except RedisError as err:
            raise _unavailable("put", err) from None

    async def get(self, tenant: str, response_id: str) -> StoredResponse | None:
        try:
            raw = await self._redis.get(self._key(tenant, response_id))
        except RedisError as err:
            raise _unavailable("get", err) from None
        if raw is None:
            return None
        data = json.loads(raw)
        return StoredResponse(tenant, data["response"], data["input_items"], data["affinity_key"])

    async def delete(self, tenant: str, response_id: str) -> bool:
        try:
            return bool(await self._delete(keys=self._keys(tenant, response_id), args=[self._ttl]))
        except RedisError as err:
            raise _unavailable("delete", err) from None

    async def ping(self) -> bool:
        try:
            return bool(await self._redis.ping())
        except RedisError:
            return False

    async def close(self) -> None:
        await self._redis.aclose()


def _unavailable(operation: str, err: RedisError) -> StoreUnavailable:
    log.warning("redis %s failed: %s", operation, err)
    return StoreUnavailable(f"redis {operation} failed: {err}")
