"""The gateway's long-lived parts, built once at startup from the settings and shared by
the HTTP and WebSocket adapters."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from turnpike.config import GatewaySettings
from turnpike.gateway.engine.response_engine import STOP_WAIT_S, ResponseEngine
from turnpike.gateway.pipeline.stages import Resources
from turnpike.gateway.pipeline.variants import CONNECTION, SPRINT, Pipeline, pipeline_named
from turnpike.gateway.sealed.sealing import Sealer
from turnpike.gateway.state.background_redis import SharedBackground
from turnpike.gateway.state.conversation_bounds import ConversationBounds
from turnpike.gateway.state.conversations import ConversationStore, InMemoryConversationStore
from turnpike.gateway.state.conversations_redis import RedisConversationStore
from turnpike.gateway.state.model_cache import ModelConfigCache
from turnpike.gateway.state.responses import ResponseStore
from turnpike.gateway.state.responses_memory import InMemoryResponseStore
from turnpike.gateway.state.responses_redis import RedisResponseStore
from turnpike.gateway.state.token_cache import TokenCache
from turnpike.gateway.tenancy.adaptive_limit import AdaptiveLimit, AdaptiveParams
from turnpike.gateway.tenancy.admission import AdmissionControl
from turnpike.gateway.tenancy.limits import FallbackLimiter, Limiter, LocalLimiter, RedisLimiter
from turnpike.gateway.tenancy.shedding import InFlight
from turnpike.gateway.tenancy.tenants import TenantDirectory
from turnpike.gateway.upstream.backends import Backends
from turnpike.gateway.upstream.billing_outbox import BillingOutbox
from turnpike.gateway.upstream.pdf_pool import PdfPool
from turnpike.gateway.upstream.sessions import Sessions, SessionSettings
from turnpike.image_resolution import Limits

PIPELINE_HEADER = "x-turnpike-pipeline"
# How long Redis keeps a background response's events after its last one.
BACKGROUND_EVENTS_TTL_S = 3600


def build_limiter(settings: GatewaySettings) -> Limiter:
    """Limits shared by every process and replica through Redis when it is configured
    (per process while it is unreachable); per process otherwise."""
    if settings.redis_url:
        return FallbackLimiter(RedisLimiter(settings.redis_url), LocalLimiter())
    return LocalLimiter()


def build_admission(settings: GatewaySettings) -> AdmissionControl:
    """Shedding at an adaptive bound under the ceiling (``TURNPIKE_MAX_IN_FLIGHT``), or at
    the ceiling itself when the adaptive limit is off; 0 turns both off."""
    ceiling = settings.max_in_flight
    adaptive = None
    if ceiling and settings.adaptive.enabled:
        a = settings.adaptive
        params = AdaptiveParams.within(
            ceiling, a.initial_in_flight, a.min_in_flight, a.tolerance, a.window_s
        )
        adaptive = AdaptiveLimit(params, time.perf_counter)
    return AdmissionControl(build_limiter(settings), InFlight(ceiling), adaptive)


@dataclass
class Gateway:
    settings: GatewaySettings
    keys: TenantDirectory  # who calls (tenant_for) and their limits
    backends: Backends
    store: ResponseStore
    outbox: BillingOutbox
    engine: ResponseEngine
    admission: AdmissionControl  # tenants' limits and overload shedding
    draining: bool = False  # told to stop: /readyz says 503 while it goes on serving

    @classmethod
    def build(cls, settings: GatewaySettings) -> Gateway:
        keys = TenantDirectory.from_settings(settings)  # first: a bad tenants file opens nothing
        backends = Backends(settings.endpoints, settings.backend_timeout_s)
        store: ResponseStore
        if settings.redis_url:
            store = RedisResponseStore(settings.redis_url, settings.redis_store_ttl_s)
        else:
            store = InMemoryResponseStore(settings.store_max_responses)
        conversations: ConversationStore
        bounds = ConversationBounds(
            settings.max_conversation_items, settings.max_conversation_bytes
        )
        if settings.redis_url:
            conversations = RedisConversationStore(
                settings.redis_url, settings.redis_store_ttl_s, bounds=bounds
            )
        else:
            conversations = InMemoryConversationStore(settings.store_max_responses, bounds=bounds)
        outbox = BillingOutbox(backends.billing, settings.billing_outbox_max_events)
        images = settings.images
        resources = Resources(
            backends,
            store,
            ModelConfigCache(settings.model_cache_ttl_s),
            TokenCache(settings.token_cache_tokens),
            Limits(images.max_image_bytes, images.max_image_pixels, images.max_request_pixels),
            conversations,
            Sealer.from_setting(settings.server_key),
            pdf=PdfPool(settings.pdf),
            sessions=Sessions(
                backends,
                SessionSettings(
                    settings.session_streams,
                    settings.session_streams_max,
                    settings.session_idle_s,
                    settings.backend_timeout_s,
                ),
            ),
        )
        admission = build_admission(settings)
        engine = ResponseEngine(
            resources,
            outbox,
            admission,
            settings.worker_silence_s,
            settings.ws_inject_wait_s,
            settings.ws_inject_max_steps,
        )
        if settings.redis_url:  # background responses' events and cancels, across replicas
            engine.background.shared = SharedBackground(
                settings.redis_url,
                min(settings.redis_store_ttl_s, BACKGROUND_EVENTS_TTL_S),
                engine.background.buffer.max_events,
            )
        return cls(settings, keys, backends, store, outbox, engine, admission)

    async def start(self) -> None:
        self.outbox.start()
        shared = self.engine.background.shared
        if shared is not None:
            # Another replica's cancel or delete: stop the response if it runs here.
            engine = self.engine
            shared.listen(lambda tenant, rid: engine.stop(tenant, rid, STOP_WAIT_S))

    async def stop(self, grace_s: float = 10.0) -> None:
        await self.engine.drain(grace_s)
        if self.engine.res.sessions is not None:
            self.engine.res.sessions.close()
        if self.engine.background.shared is not None:
            await self.engine.background.shared.close()
        await self.outbox.close(grace_s)
        await self.backends.close()
        await self.store.close()
        await self.engine.res.conversations.close()
        await self.admission.close()
        await self.engine.res.pdf.close()

    def start_draining(self) -> None:
        """The gateway is stopping (turnpike.gateway.api.lame_duck): not ready any more."""
        self.draining = True

    async def readiness(self) -> tuple[bool, dict[str, Any]]:
        """Whether the gateway can serve (its backends answer, and it has room to admit a
        response), and what it knows. The store is reported, not required: a shared store
        (Redis) that is down takes every replica down with it, and a gateway that is up
        answers its clients why."""
        services = await self.backends.health()
        ready = all(services.values()) and self.admission.can_admit() and not self.draining
        return ready, {
            "draining": self.draining,
            "services": services,
            "store": await self.store.ping(),
            "admission": self.admission.describe(),
        }

    def pipeline_for(self, headers: Mapping[str, str], websocket: bool) -> Pipeline:
        default = CONNECTION if websocket else SPRINT
        return pipeline_named(
            headers.get(PIPELINE_HEADER), default, self.settings.allow_pipeline_override
        )
