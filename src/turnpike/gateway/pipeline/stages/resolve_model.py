"""``resolve_model``: the model the request names, with its configuration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import grpc

from turnpike.gateway.pipeline.prepared import Prepared
from turnpike.gateway.pipeline.stages.base import Resources, Stage
from turnpike.gateway.protocol.errors import echo, invalid
from turnpike.router.v1 import router_pb2


@dataclass(frozen=True)
class ResolveModel(Stage):
    name: ClassVar[str] = "resolve_model"
    inputs: ClassVar[frozenset[str]] = frozenset({"request", "parent"})
    output: ClassVar[str] = "model"
    # Reuse the previous turn's model when the request names it again.
    reuse: bool = False
    # Keep model configurations in process instead of asking the router each time.
    cached: bool = False

    async def run(self, p: Prepared, res: Resources) -> router_pb2.ModelConfig:
        name = p.request.model
        previous = p.parent.state.model if p.parent is not None else None
        if self.reuse and previous is not None and name in (previous.id, *previous.aliases):
            return previous
        if self.cached and (cached := res.model_cache.get(name)) is not None:
            return cached
        return await resolve_model(res, name)

    def check(self, p: Prepared) -> None:
        asked, model = p.request.max_output_tokens, p.model
        assert model is not None
        if asked and asked > model.max_output_tokens:
            raise invalid(
                f"'max_output_tokens' is {asked}, above the model's limit of {model.max_output_tokens}.",
                "max_output_tokens",
                "invalid_value",
            )


async def resolve_model(res: Resources, name: str) -> router_pb2.ModelConfig:
    """The router's configuration of the model ``name``, or the API's not-found error."""
    model = await res.backends.call(
        "router",
        res.backends.router.ResolveModel,
        router_pb2.ResolveModelRequest(model=name),
        {
            grpc.StatusCode.NOT_FOUND: lambda _: invalid(
                f"The model {echo(name)} does not exist or you do not have access to it.",
                "model",
                "model_not_found",
            )
        },
    )
    # Filled on every pipeline: a cached pipeline later finds what any of them resolved.
    res.model_cache.put(name, model)
    return model
