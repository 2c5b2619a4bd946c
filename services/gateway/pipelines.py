"""The pipelines: the same stages (``gateway.stages``), composed three ways.

A pipeline is a list of stages run in order; ``Concurrently`` groups the ones that run
at the same time. Each variant switches one change of the design on or off, so a
benchmark can measure what each change buys::

                    legacy              sprint (HTTP)             connection (WebSocket)
  load_conversation store               store + TokenCache        connection cache, else store
  validate_history  whole history       whole history             new items only
  resolve_model     router              ModelConfigCache          previous turn, else cache
  safety            whole history       whole history, fused      new items only, fused
  resolve_images    by the imageres hop in process                in process, new images only
  render            whole history       append to cached tokens   append to cached tokens
                                        (by content if no parent)
  route             router              router                    previous turn's worker
  safety..render    one after another   at the same time          at the same time
  worker            via imageres        direct                    direct
  billing           before the end      in the background         in the background

No stage adds or removes artificial delay: the slow path is slow only because it does
more real work.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from gateway.errors import invalid
from gateway.stages import (
    Concurrently,
    LoadConversation,
    Render,
    ResolveImages,
    ResolveModel,
    Route,
    Safety,
    Stage,
    Step,
    ValidateHistory,
)

S = TypeVar("S", bound=Stage)


@dataclass(frozen=True)
class Pipeline:
    name: str
    stages: tuple[Step, ...]
    # Reach the worker through the image-resolution proxy, which resolves the images.
    image_hop: bool
    # Record billing before the terminal event (instead of in the background).
    blocking_billing: bool

    def __post_init__(self) -> None:
        # Images are charged as prompt tokens: resolved exactly once, by a stage or the hop.
        if self.image_hop == any(isinstance(s, ResolveImages) for s in self.each_stage()):
            raise ValueError(f"{self.name}: images need one resolver, the hop or ResolveImages")

    def each_stage(self) -> Iterator[Stage]:
        """Every stage in order, concurrent ones in the order they are listed."""
        for step in self.stages:
            yield from step.stages if isinstance(step, Concurrently) else (step,)

    def stage(self, kind: type[S]) -> S:
        for stage in self.each_stage():
            if isinstance(stage, kind):
                return stage
        raise LookupError(f"pipeline {self.name} has no {kind.__name__} stage")

    @functools.cached_property
    def cache_rendered_tokens(self) -> bool:
        """Whether finishing keeps each response's rendered tokens (for its loader)."""
        return self.stage(LoadConversation).rendered_tokens


LEGACY = Pipeline(
    "legacy",
    stages=(
        LoadConversation(),
        ValidateHistory(),
        ResolveModel(),
        Safety(),
        Render(),
        Route(),
    ),
    image_hop=True,
    blocking_billing=True,
)
SPRINT = Pipeline(
    "sprint",
    stages=(
        LoadConversation(rendered_tokens=True),
        ValidateHistory(),
        ResolveModel(cached=True),
        Concurrently(Safety(fast=True), ResolveImages(), Render(append=True, by_content=True)),
        Route(),
    ),
    image_hop=False,
    blocking_billing=False,
)
CONNECTION = Pipeline(
    "connection",
    stages=(
        LoadConversation(from_connection=True),
        ValidateHistory(incremental=True),
        ResolveModel(reuse=True, cached=True),
        Concurrently(
            Safety(incremental=True, fast=True), ResolveImages(reuse=True), Render(append=True)
        ),
        Route(reuse=True),
    ),
    image_hop=False,
    blocking_billing=False,
)
PIPELINES = {p.name: p for p in (LEGACY, SPRINT, CONNECTION)}


def pipeline_named(name: str | None, default: Pipeline, allow_override: bool) -> Pipeline:
    """The pipeline a request asked for (``X-Turnpike-Pipeline``), when allowed."""
    if not name or not allow_override:
        return default
    try:
        return PIPELINES[name.strip().lower()]
    except KeyError:
        raise invalid(
            f"Unknown pipeline '{name}'; expected one of: {', '.join(PIPELINES)}.",
            "X-Turnpike-Pipeline",
            "invalid_value",
        ) from None
