"""In-process stand-ins for the gateway's backends (router, safety, tokenizer), and the
requests, contexts and parents the pipeline and stage tests build on."""

from __future__ import annotations

import asyncio
from array import array
from typing import Any

import grpc

from turnpike.gateway.engine.response_engine import ResponseEngine
from turnpike.gateway.pipeline.prepared import Prepared, Prompt
from turnpike.gateway.pipeline.request_context import RequestContext
from turnpike.gateway.pipeline.stages import Resources
from turnpike.gateway.pipeline.variants import Pipeline
from turnpike.gateway.protocol.items import to_proto
from turnpike.gateway.protocol.request import CreateRequest, parse_create
from turnpike.gateway.state.connection_cache import ConnectionCache
from turnpike.gateway.state.conversation_state import ConversationState, RenderedPrefix
from turnpike.gateway.state.model_cache import ModelConfigCache
from turnpike.gateway.state.responses import StoredResponse
from turnpike.gateway.state.responses_memory import InMemoryResponseStore
from turnpike.gateway.state.token_cache import TokenCache
from turnpike.gateway.upstream.backends import Backends
from turnpike.image_resolution import Limits
from turnpike.router.v1 import router_pb2, router_pb2_grpc
from turnpike.safety.v1 import safety_pb2, safety_pb2_grpc
from turnpike.tokenizer.v1 import tokenizer_pb2, tokenizer_pb2_grpc

TENANT = "acme"
MODEL = router_pb2.ModelConfig(
    id="sim", aliases=["sim-alias"], context_window=100, max_output_tokens=64
)
COMPLETION_PROMPT = [9, 9]


# -- stand-ins for the backends ----------------------------------------------------------
# Each is a subclass of the gRPC stub it stands in for, so that it fits where the gateway
# takes that stub; it answers here, and never opens the stub's channel.


class Router(router_pb2_grpc.RouterStub):
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def ResolveModel(self, request, timeout=None):
        self.calls.append("ResolveModel")
        if request.model not in (MODEL.id, *MODEL.aliases):
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.NOT_FOUND, grpc.aio.Metadata(), grpc.aio.Metadata(), "no model"
            )
        return MODEL

    async def Route(self, request, timeout=None):
        self.calls.append("Route")
        return router_pb2.RouteDecision(model=MODEL, worker_id="worker-1", worker_address="w:1")


class SafetyService(safety_pb2_grpc.SafetyStub):
    def __init__(self) -> None:
        self.requests: list[safety_pb2.ClassifyRequest] = []
        self.verdict = safety_pb2.ALLOW
        self.wait_for: asyncio.Event | None = None

    async def Classify(self, request, timeout=None):
        self.requests.append(request)
        if self.wait_for is not None:
            await self.wait_for.wait()
        findings = [safety_pb2.Finding(category="profanity")]
        return safety_pb2.ClassifyResponse(
            verdict=self.verdict,
            findings=findings if self.verdict != safety_pb2.ALLOW else [],
            items_scored=len(request.items),
        )


class Tokenizer(tokenizer_pb2_grpc.TokenizerStub):
    """Every item renders to ``per_item`` tokens: 1s in full, 2s appended."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []
        self.per_item = 3
        self.rendered = asyncio.Event()

    async def Render(self, request, timeout=None):
        self.calls.append(("Render", len(request.items)))
        self.rendered.set()
        return tokenizer_pb2.RenderResponse(
            tokens=[1] * (self.per_item * len(request.items)), completion_prompt=COMPLETION_PROMPT
        )

    async def RenderAppend(self, request, timeout=None):
        self.calls.append(("RenderAppend", len(request.items)))
        self.rendered.set()
        return tokenizer_pb2.RenderResponse(
            tokens=[2] * (self.per_item * len(request.items)), completion_prompt=COMPLETION_PROMPT
        )


class StandIns(Backends):
    """The gateway's backend clients (and their one way of calling), over stand-ins."""

    router: Router
    safety: SafetyService
    tokenizer: Tokenizer

    def __init__(self) -> None:
        self.timeout_s = 1.0
        self.router = Router()
        self.safety = SafetyService()
        self.tokenizer = Tokenizer()


def resources(backends: Backends) -> Resources:
    return Resources(
        backends, InMemoryResponseStore(100), ModelConfigCache(30.0), TokenCache(10**6), Limits()
    )


def create(websocket: bool = False, **body) -> CreateRequest:
    return parse_create(
        {"model": "sim", "input": "hi", **body}, default_model="sim", websocket=websocket
    )


def context(pipeline: Pipeline, cache: ConnectionCache | None = None, tenant: str = TENANT):
    return RequestContext(tenant, pipeline.name, connection_cache=cache)


async def prepare(
    engine: ResponseEngine,
    request: CreateRequest,
    pipeline: Pipeline,
    ctx: RequestContext | None = None,
) -> Prepared:
    return await engine.prepare(request, ctx or context(pipeline), pipeline)


def prompt_of(prepared: Prepared) -> Prompt:
    """What the render stage made (None on ``Prepared`` until it ran)."""
    assert prepared.prompt is not None, "not rendered"
    return prepared.prompt


def response_of(prepared: Prepared) -> dict[str, Any]:
    """The response object the engine added once the stages were done."""
    assert prepared.response is not None, "no response object"
    return prepared.response


def message(role: str, text: str, item_id: str) -> dict:
    kind = "output_text" if role == "assistant" else "input_text"
    return {
        "id": item_id,
        "type": "message",
        "role": role,
        "content": [{"type": kind, "text": text}],
        "status": "completed",
    }


PARENT_INPUT = [message("user", "hello", "msg_u1")]
PARENT_OUTPUT = [message("assistant", "hi there", "msg_a1")]


async def store_parent(engine: ResponseEngine, response_id: str = "resp_parent") -> None:
    response = {"id": response_id, "output": PARENT_OUTPUT, "previous_response_id": None}
    await engine.res.store.put(StoredResponse(TENANT, response, PARENT_INPUT, "affinity-1"))


def cached_parent(follow_up: CreateRequest) -> ConversationState:
    """What a connection keeps of a finished response: model, worker, rendered tokens."""
    history = [*PARENT_INPUT, *PARENT_OUTPUT]
    call_names: dict[str, str] = {}
    proto_history = to_proto(history, call_names)
    return ConversationState(
        response={"id": "resp_parent"},
        history=history,
        proto_history=proto_history,
        call_names=call_names,
        conversation_id="resp_first",
        affinity_key="affinity-1",
        rendered=RenderedPrefix(
            follow_up.header_key,
            array("I", [5] * 10),
            len(proto_history),
            array("I", COMPLETION_PROMPT),
        ),
        model=MODEL,
        route=router_pb2.RouteDecision(model=MODEL, worker_id="worker-9", worker_address="w:9"),
        image_tokens=7,
    )
