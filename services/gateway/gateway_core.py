"""The gateway's long-lived parts, built once at startup and shared by the
HTTP and WebSocket adapters."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from turnpike.config import GatewaySettings

from gateway.auth import ApiKeys, parse_api_keys
from gateway.backends import Backends
from gateway.billing_outbox import BillingOutbox
from gateway.engine import ResponseEngine
from gateway.errors import ApiError, invalid
from gateway.pipelines import CONNECTION, SPRINT, Pipeline, pipeline_named
from gateway.request_state import RequestContext
from gateway.store import ResponseStore
from gateway.store_redis import RedisResponseStore

PIPELINE_HEADER = "x-turnpike-pipeline"


@dataclass
class Gateway:
    settings: GatewaySettings
    keys: ApiKeys
    backends: Backends
    store: ResponseStore | RedisResponseStore
    outbox: BillingOutbox
    engine: ResponseEngine

    @classmethod
    def build(cls, settings: GatewaySettings) -> Gateway:
        backends = Backends(settings.endpoints)
        if settings.redis_url:
            store = RedisResponseStore(settings.redis_url, settings.redis_store_ttl_s)
        else:
            store = ResponseStore(settings.store_max_responses)
        outbox = BillingOutbox(backends.billing)
        engine = ResponseEngine(
            backends,
            store,
            outbox,
            settings.backend_timeout_s,
            model_cache_ttl_s=settings.model_cache_ttl_s,
            token_cache_tokens=settings.token_cache_tokens,
        )
        return cls(
            settings, ApiKeys(parse_api_keys(settings.api_keys)), backends, store, outbox, engine
        )

    async def start(self) -> None:
        self.outbox.start()

    async def stop(self, grace_s: float = 10.0) -> None:
        await self.engine.drain(grace_s)
        await self.outbox.close(grace_s)
        await self.backends.close()
        if isinstance(self.store, RedisResponseStore):
            await self.store.close()

    def pipeline_for(self, headers: Any, websocket: bool) -> Pipeline:
        default = CONNECTION if websocket else SPRINT
        return pipeline_named(
            headers.get(PIPELINE_HEADER), default, self.settings.allow_pipeline_override
        )

    def context(self, tenant: str, pipeline: Pipeline, **kwargs: Any) -> RequestContext:
        return RequestContext(tenant=tenant, pipeline=pipeline, **kwargs)


def dumps(obj: Any) -> str:
    """Compact JSON, as every event and body leaves the gateway."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def parse_json(raw: bytes | str) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise invalid(
            f"We could not parse the JSON body of your request: {err}.",
            None,
            "invalid_json",
        ) from None


__all__ = ["PIPELINE_HEADER", "ApiError", "Gateway", "dumps", "parse_json"]
