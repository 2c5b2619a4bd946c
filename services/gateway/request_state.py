"""One request's state: its context (tenant, pipeline, where the time went) and what
the pipeline's stages prepare for generation."""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import trace
from turnpike.conversation.v1 import conversation_pb2
from turnpike.router.v1 import router_pb2

from gateway.items import Item
from gateway.request import CreateRequest
from gateway.state import ConnectionCache, ConversationState, RenderedPrefix

if TYPE_CHECKING:
    from gateway.pipelines import Pipeline

tracer = trace.get_tracer("turnpike.gateway")


@dataclass
class RequestContext:
    tenant: str
    pipeline: Pipeline
    connection_cache: ConnectionCache | None = None
    lane: str | None = None  # WebSocket stream_id
    stage_ms: dict[str, float] = field(default_factory=dict)
    # The response's own span (gateway.tracing.response_span); the engine ends it.
    span: trace.Span = trace.INVALID_SPAN

    @contextmanager
    def stage(self, name: str) -> Iterator[trace.Span]:
        """Time a stage and give it a span, so one trace shows where time went."""
        start = time.perf_counter()
        with tracer.start_as_current_span(f"stage.{name}") as span:
            span.set_attribute("turnpike.pipeline", self.pipeline.name)
            yield span
        self.stage_ms[name] = self.stage_ms.get(name, 0.0) + (time.perf_counter() - start) * 1000


@dataclass
class Prepared:
    """One response as the stages fill it in (by the stage named above each group of
    fields), then what generation and finishing work from."""

    request: CreateRequest
    ctx: RequestContext
    response_id: str
    # load_conversation: the response this one continues.
    parent: ConversationState | None = None
    # validate_history: the conversation so far, and the request's new items.
    history: list[Item] = field(default_factory=list)  # without the new items
    call_names: dict[str, str] = field(default_factory=dict)  # with the new items' calls
    new_items: list[conversation_pb2.Item] = field(default_factory=list)
    proto_history: list[conversation_pb2.Item] = field(default_factory=list)  # with them
    conversation_id: str = ""
    affinity_key: str = ""
    # resolve_model: the model, and the response object that names it.
    model: router_pb2.ModelConfig | None = None
    response: dict[str, Any] = field(default_factory=dict)
    # safety
    safety_flags: list[str] = field(default_factory=list)
    # resolve_images: tokens of the conversation's input images (charged as prompt tokens).
    image_tokens: int = 0
    # render
    prompt: array | list[int] = field(default_factory=list)
    rendered: RenderedPrefix | None = None
    # route
    route: router_pb2.RouteDecision | None = None
    # generation: model-side timings reported by the worker.
    model_timings: dict[str, float] = field(default_factory=dict)
    worker_id: str = ""
