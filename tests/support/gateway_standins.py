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
from turnpike.gateway.upstream.sessions import Sessions, SessionSettings
from turnpike.image_resolution import Limits
from turnpike.router.v1 import router_pb2, router_pb2_grpc
from turnpike.safety.v1 import safety_pb2, safety_pb2_grpc
from turnpike.session.v1 import session_pb2
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


class SessionCall:
    """A session stream (turnpike/session/v1) over a stand-in: each request written is
    answered by ``answer`` in order; ``broken`` makes every write fail, as on a stream
    whose service went away."""

    def __init__(self, answer: Any, standin: Any) -> None:
        self._answer = answer
        self._standin = standin
        self._replies: asyncio.Queue[Any] = asyncio.Queue()

    async def write(self, request: Any) -> None:
        if self._standin.broken:
            raise RuntimeError("the stream's service is gone")
        self._replies.put_nowait(await self._answer(request))

    async def read(self) -> Any:
        return await self._replies.get()

    def cancel(self) -> bool:
        self._replies.put_nowait(grpc.aio.EOF)
        return True


class SafetyService(safety_pb2_grpc.SafetyStub):
    def __init__(self) -> None:
        self.requests: list[safety_pb2.ClassifyRequest] = []
        self.on_stream: list[safety_pb2.ClassifyRequest] = []  # asked on a session stream
        self.verdict = safety_pb2.ALLOW
        self.wait_for: asyncio.Event | None = None
        self.broken = False  # its session streams fail

    def ClassifySession(self, timeout=None):
        async def answer(message):
            self.on_stream.append(message.request)
            reply = await self.Classify(message.request)
            self.requests.pop()  # counted as asked on the stream, not called
            return safety_pb2.ClassifySessionReply(seq=message.seq, response=reply)

        return SessionCall(answer, self)

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
        self.broken = False  # its session streams fail
        self.refusal: session_pb2.Refusal | None = None  # what its stream answers instead

    def RenderSession(self, timeout=None):
        async def answer(message):
            if self.refusal is not None:
                return tokenizer_pb2.RenderSessionReply(seq=message.seq, refusal=self.refusal)
            full = message.WhichOneof("render") == "full"
            render = self.Render if full else self.RenderAppend
            reply = await render(getattr(message, message.WhichOneof("render")))
            name, items = self.calls.pop()
            self.calls.append((f"{name} on stream", items))
            return tokenizer_pb2.RenderSessionReply(seq=message.seq, response=reply)

        return SessionCall(answer, self)

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


def resources(backends: Backends, sessions: bool = False) -> Resources:
    """The stages' resources over ``backends``; ``sessions``: client connections ask
    safety and the tokenizer on session streams."""
    streams = Sessions(backends, SessionSettings(True, 16, 60.0, 1.0)) if sessions else None
    return Resources(
        backends,
        InMemoryResponseStore(100),
        ModelConfigCache(30.0),
        TokenCache(10**6),
        Limits(),
        sessions=streams,
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
