"""The pipelines: the same stages (``turnpike.gateway.pipeline.stages``), composed three ways.

A pipeline is a list of stages run in order; ``Concurrently`` groups the ones that run
at the same time. Each variant switches one change of the design on or off, so a
benchmark can measure what each change buys::

                    legacy              sprint (HTTP)             connection (WebSocket)
  load_conversation store               store + TokenCache        connection cache, else store
  validate_history  whole history       whole history             new items only
  resolve_model     router              ModelConfigCache          previous turn, else cache
  safety            whole history       whole history, fused      new items only, fused
                                        (new items only on a
                                        chain's session stream)
  resolve_images    by the imageres hop in process                in process, new images only
  render            whole history       append to cached tokens   append to cached tokens
                                        (by content if no parent)
  safety, render    calls               the chain's session       the socket's session
  are asked by                          streams, else calls       streams, else calls
  route             router              router                    previous turn's worker
  safety..render    one after another   at the same time          at the same time
  worker            via imageres        direct                    direct
  billing           before the end      in the background         in the background

No stage adds or removes artificial delay: the slow path is slow only because it does
more real work.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from turnpike.gateway.pipeline.prepared import GIVEN, Policy, Prepared
from turnpike.gateway.pipeline.stages import (
    Concurrently,
    LoadConversation,
    Render,
    ResolveImages,
    ResolveModel,
    Resources,
    Route,
    Safety,
    Stage,
    Step,
    ValidateHistory,
    each_stage,
)
from turnpike.gateway.protocol.errors import invalid


@dataclass(frozen=True)
class Pipeline:
    name: str
    steps: tuple[Step, ...]
    # Reach the worker through the image-resolution proxy, which resolves the images.
    image_hop: bool
    # Record billing before the terminal event (instead of in the background).
    blocking_billing: bool

    def __post_init__(self) -> None:
        check_data_flow(self.name, self.steps)
        # Images are charged as prompt tokens: resolved exactly once, by a stage or the hop.
        if self.image_hop == any(isinstance(s, ResolveImages) for s in each_stage(self.steps)):
            raise ValueError(f"{self.name}: images need one resolver, the hop or ResolveImages")

    @functools.cached_property
    def policy(self) -> Policy:
        load = [s for s in each_stage(self.steps) if isinstance(s, LoadConversation)]
        return Policy(
            worker_via_imageres=self.image_hop,
            billing_before_terminal=self.blocking_billing,
            # Finishing keeps what this pipeline's loader looks up.
            keep_rendered_tokens=any(stage.rendered_tokens for stage in load),
        )

    async def prepare(self, p: Prepared, res: Resources) -> None:
        """Run every step in order; each stage fills in its output of ``p``."""
        for step in self.steps:
            await step.perform(p, res)


def check_data_flow(name: str, steps: tuple[Step, ...]) -> None:
    """Every stage reads only what is given or what an earlier step wrote; no field has
    two writers, and stages running at the same time never read each other's output."""
    written: set[str] = set(GIVEN)
    for step in steps:
        group: tuple[Stage, ...] = step.stages
        outputs = [stage.output for stage in group]
        for stage in group:
            if stage.output in written or outputs.count(stage.output) > 1:
                raise ValueError(
                    f"{name}: {stage.name} writes '{stage.output}', which another stage writes"
                )
            if missing := sorted(stage.inputs - written):
                raise ValueError(
                    f"{name}: {stage.name} reads {', '.join(missing)}, which no earlier step writes"
                )
        written.update(outputs)


LEGACY = Pipeline(
    "legacy",
    steps=(
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
    steps=(
        LoadConversation(rendered_tokens=True),
        ValidateHistory(),
        ResolveModel(cached=True),
        Concurrently(
            Safety(incremental=True, fast=True, session=True),
            ResolveImages(),
            Render(append=True, by_content=True, session=True),
        ),
        Route(),
    ),
    image_hop=False,
    blocking_billing=False,
)
CONNECTION = Pipeline(
    "connection",
    steps=(
        LoadConversation(from_connection=True),
        ValidateHistory(incremental=True),
        ResolveModel(reuse=True, cached=True),
        Concurrently(
            Safety(incremental=True, fast=True, session=True),
            ResolveImages(reuse=True),
            Render(append=True, session=True),
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
