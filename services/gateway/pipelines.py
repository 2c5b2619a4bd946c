"""The pipelines: one set of stages, three configurations.

Each flag switches one change of the design on or off, so a benchmark can
measure what each change buys. No flag adds or removes artificial delay: the
slow path is slow only because it does more real work.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.errors import invalid


@dataclass(frozen=True)
class Pipeline:
    name: str
    # Continue from the connection-scoped cache instead of rebuilding from the store.
    connection_cache: bool
    # Classify only the new input, folding it into the conversation's safety state.
    incremental_safety: bool
    # Score with the fused classifier (same scores, a fraction of the work).
    fast_safety: bool
    # Keep model configurations in process instead of asking the router each time.
    cache_model_config: bool
    # Keep each response's rendered tokens in process; a follow-up renders only its new items.
    cache_rendered_tokens: bool
    # Render only the new items and append them to cached tokens.
    append_render: bool
    # Reuse the previous turn's model resolution and worker.
    reuse_route: bool
    # Reach the worker through the image-resolution proxy.
    image_hop: bool
    # Run safety, image resolution and rendering at the same time (all finish before
    # generation starts).
    overlap_checks: bool
    # Record billing before the terminal event (instead of in the background).
    blocking_billing: bool


LEGACY = Pipeline(
    "legacy",
    connection_cache=False,
    incremental_safety=False,
    fast_safety=False,
    cache_model_config=False,
    cache_rendered_tokens=False,
    append_render=False,
    reuse_route=False,
    image_hop=True,
    overlap_checks=False,
    blocking_billing=True,
)
SPRINT = Pipeline(
    "sprint",
    connection_cache=False,
    incremental_safety=False,
    fast_safety=True,
    cache_model_config=True,
    cache_rendered_tokens=True,
    append_render=True,
    reuse_route=False,
    image_hop=False,
    overlap_checks=True,
    blocking_billing=False,
)
CONNECTION = Pipeline(
    "connection",
    connection_cache=True,
    incremental_safety=True,
    fast_safety=True,
    cache_model_config=True,
    cache_rendered_tokens=False,
    append_render=True,
    reuse_route=True,
    image_hop=False,
    overlap_checks=True,
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
