"""The response store in Redis: the optional shared tier.

Every gateway replica sees every stored response, so an HTTP follow-up may land on
any replica. One key per response, scoped by tenant, JSON, expiring after
``ttl_s``. Redis trouble is ``StoreUnavailable`` for the request that needed it (a 503
for the client), never a crash.
"""

from __future__ import annotations

import json
import logging

from redis import asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from gateway.store import StoredResponse, StoreUnavailable

log = logging.getLogger(__name__)


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

    def _key(self, tenant: str, response_id: str) -> str:
        return f"{self._prefix}:{tenant}:{response_id}"

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
            await self._redis.set(self._key(record.tenant, record.id), value, ex=self._ttl)
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
            return bool(await self._redis.delete(self._key(tenant, response_id)))
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
