"""A response store that goes away in the middle of a response (Redis stopped between the
response's first save and its last, as the chaos test does): the client must not get a
completed response the store does not hold (the engine bills what was generated either
way: the chaos test checks the ledger)."""

from __future__ import annotations

from opentelemetry.trace import SpanContext
from support.billing_standin import RecordingBilling
from support.gateway_standins import TENANT, StandIns, create, prepare

from turnpike.billing.v1 import billing_pb2
from turnpike.gateway.engine.response_engine import ResponseEngine
from turnpike.gateway.pipeline.stages import Resources
from turnpike.gateway.pipeline.variants import SPRINT
from turnpike.gateway.state.model_cache import ModelConfigCache
from turnpike.gateway.state.responses import StoredResponse, StoreUnavailable
from turnpike.gateway.state.responses_memory import InMemoryResponseStore
from turnpike.gateway.state.token_cache import TokenCache
from turnpike.gateway.upstream.billing_outbox import BillingOutbox
from turnpike.image_resolution import Limits


class StoreGoesAway(InMemoryResponseStore):
    """Saves the first ``works`` puts, then is unavailable."""

    def __init__(self, works: int) -> None:
        super().__init__(100)
        self.works = works

    async def put(self, record: StoredResponse) -> None:
        if self.works == 0:
            raise StoreUnavailable("redis put failed: connection refused")
        self.works -= 1
        await super().put(record)


class Outbox(BillingOutbox):
    """Records what the engine bills (and delivers none of it)."""

    def __init__(self) -> None:
        super().__init__(RecordingBilling())
        self.events: list[billing_pb2.UsageEvent] = []

    async def submit(
        self, event: billing_pb2.UsageEvent, origin: SpanContext | None = None
    ) -> None:
        self.events.append(event)

    async def record_now(
        self, event: billing_pb2.UsageEvent, origin: SpanContext | None = None
    ) -> None:
        self.events.append(event)


async def respond(store: InMemoryResponseStore) -> tuple[list[dict], Outbox]:
    outbox = Outbox()
    resources = Resources(StandIns(), store, ModelConfigCache(30.0), TokenCache(10**6), Limits())
    engine = ResponseEngine(resources, outbox=outbox)
    # generate=False: the response completes without a worker, through the same finish.
    prepared = await prepare(engine, create(generate=False), SPRINT)
    queue = engine.start(prepared)
    return [event async for event in queue.events()], outbox


async def test_a_response_the_store_lost_ends_failed_and_clear_not_completed() -> None:
    store = StoreGoesAway(works=1)  # the in-progress save works, the final one does not
    events, _ = await respond(store)
    terminal = events[-1]
    assert terminal["type"] == "response.failed", [e["type"] for e in events]
    error = terminal["response"]["error"]
    assert error["code"] == "service_unavailable" and "store" in error["message"]


async def test_a_store_down_from_the_start_fails_the_response_clearly() -> None:
    events, outbox = await respond(StoreGoesAway(works=0))
    terminal = events[-1]
    assert terminal["type"] == "response.failed"
    assert terminal["response"]["error"]["code"] == "service_unavailable"
    assert outbox.events == []  # nothing was generated


async def test_with_the_store_up_the_response_completes_and_is_kept() -> None:
    store = StoreGoesAway(works=10)
    events, _ = await respond(store)
    assert events[-1]["type"] == "response.completed"
    stored = await store.get(TENANT, events[-1]["response"]["id"])
    assert stored is not None and stored.response["status"] == "completed"
