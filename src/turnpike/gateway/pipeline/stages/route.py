"""``route``: the worker that generates (only when the request asks for generation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.pipeline.stages.base import Resources, Stage
from turnpike.gateway.upstream.backends import Backends
from turnpike.router.v1 import router_pb2


@dataclass(frozen=True)
class Route(Stage):
    name: ClassVar[str] = "route"
    inputs: ClassVar[frozenset[str]] = frozenset(
        {"request", "parent", "conversation", "model", "prompt"}
    )
    output: ClassVar[str] = "route"
    # Reuse the previous turn's worker for the same model.
    reuse: bool = False

    def applies(self, p: Prepared) -> bool:
        return p.request.generate and not p.request.compact_now  # a trigger generates nothing

    async def run(self, p: Prepared, res: Resources) -> router_pb2.RouteDecision:
        model, conversation, prompt = p.model, p.conversation, p.prompt
        assert model is not None and conversation is not None and prompt is not None
        previous = p.parent.state.route if p.parent is not None else None
        if self.reuse and previous is not None and previous.model.id == model.id:
            return previous
        return await pick_worker(
            res.backends, model.id, conversation.affinity_key, len(prompt.tokens)
        )


async def pick_worker(
    backends: Backends,
    model: str,
    affinity_key: str,
    prompt_tokens: int,
    exclude: list[str] | None = None,
) -> router_pb2.RouteDecision:
    """Ask the router for a worker (also how generation moves off a worker that is gone)."""
    request = router_pb2.RouteRequest(
        model=model,
        affinity_key=affinity_key,
        prompt_tokens=prompt_tokens,
        exclude_workers=exclude or [],
    )
    return await backends.call("router", backends.router.Route, request)
