"""The pipelines as compositions of stages: their data flow, checked when a pipeline is
built and held to by every stage."""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import pytest
from support.gateway_standins import cached_parent, context, create, store_parent

from turnpike.gateway.pipeline.prepared import STAGE_OUTPUTS, Prepared
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
    ValidateHistory,
    each_stage,
)
from turnpike.gateway.pipeline.variants import (
    CONNECTION,
    LEGACY,
    PIPELINES,
    SPRINT,
    Pipeline,
    check_data_flow,
    pipeline_named,
)
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.state.connection_cache import ConnectionCache

# -- composition and data flow ---------------------------------------------------------


def steps(*names: str) -> tuple:
    """Stages by name, in the order the pipelines list them."""
    stage_of = {
        "load": LoadConversation(),
        "validate": ValidateHistory(),
        "model": ResolveModel(),
        "safety": Safety(),
        "images": ResolveImages(),
        "render": Render(),
        "route": Route(),
    }
    return tuple(stage_of[name] for name in names)


def test_the_pipelines_are_the_three_of_the_design() -> None:
    assert PIPELINES == {"legacy": LEGACY, "sprint": SPRINT, "connection": CONNECTION}
    assert (LEGACY.policy.worker_via_imageres, LEGACY.policy.billing_before_terminal) == (
        True,
        True,
    )
    # Sprint keeps each response's tokens for its own loader; the others never look.
    assert [p.policy.keep_rendered_tokens for p in (LEGACY, SPRINT, CONNECTION)] == [
        False,
        True,
        False,
    ]


def test_a_stage_may_read_only_what_an_earlier_step_wrote() -> None:
    check_data_flow("ok", steps("load", "validate", "model", "render", "route"))
    with pytest.raises(ValueError, match=r"bad: render reads conversation, model, parent"):
        check_data_flow("bad", steps("render"))
    with pytest.raises(ValueError, match=r"bad: route reads prompt, which no earlier step"):
        check_data_flow("bad", steps("load", "validate", "model", "route", "render"))


def test_stages_running_together_neither_share_an_output_nor_read_each_other() -> None:
    load, validate, model, *_ = steps("load", "validate", "model")
    head = (load, validate, model)
    check_data_flow("ok", (*head, Concurrently(Safety(), ResolveImages(), Render())))
    with pytest.raises(ValueError, match="render writes 'prompt', which another stage writes"):
        check_data_flow("bad", (*head, Concurrently(Render(), Render(append=True))))
    with pytest.raises(ValueError, match="route reads prompt, which no earlier step writes"):
        check_data_flow("bad", (*head, Concurrently(Render(), Route())))
    with pytest.raises(ValueError, match="resolve_model writes 'model', which another"):
        check_data_flow("bad", (*head, ResolveModel(cached=True)))


def test_images_are_resolved_once_by_the_hop_or_by_a_stage() -> None:
    head = steps("load", "validate", "model")
    with pytest.raises(ValueError, match="one resolver"):
        Pipeline("both", (*head, Concurrently(ResolveImages(), Render())), True, False)
    with pytest.raises(ValueError, match="one resolver"):
        Pipeline("neither", (*head, Render()), False, False)


class Recorded(Prepared):
    """A ``Prepared`` that notes which stage reads or writes which of its fields."""

    FIELDS: ClassVar[frozenset[str]] = frozenset(f.name for f in dataclasses.fields(Prepared))

    def __init__(self, *args) -> None:
        object.__setattr__(self, "current", None)  # the stage at work
        object.__setattr__(self, "reads", {})
        object.__setattr__(self, "writes", {})
        super().__init__(*args)

    def __getattribute__(self, name: str):
        if name in Recorded.FIELDS:
            current = object.__getattribute__(self, "current")
            object.__getattribute__(self, "reads").setdefault(current, set()).add(name)
        return object.__getattribute__(self, name)

    def __setattr__(self, name: str, value) -> None:
        if name in Recorded.FIELDS and self.current is not None:
            self.writes.setdefault(self.current, set()).add(name)
        object.__setattr__(self, name, value)


async def run_recorded(pipeline: Pipeline, p: Recorded, res: Resources) -> None:
    """Each stage on its own (reads of stages running together are told apart)."""
    for stage in each_stage(pipeline.steps):
        object.__setattr__(p, "current", stage)
        if stage.applies(p):
            output = await stage.run(p, res)
            object.__setattr__(p, "current", "pipeline")
            setattr(p, stage.output, output)
            object.__setattr__(p, "current", stage)
            stage.check(p)


@pytest.mark.parametrize("pipeline", [LEGACY, SPRINT, CONNECTION], ids=lambda p: p.name)
@pytest.mark.parametrize("turn", ["first", "from the store", "from the connection cache"])
async def test_every_stage_reads_only_its_inputs_and_writes_only_its_output(
    engine, pipeline: Pipeline, turn: str
) -> None:
    await store_parent(engine)
    request, cache = create(), ConnectionCache(4)
    if turn != "first":
        request = create(previous_response_id="resp_parent", input="and now?")
    if turn == "from the connection cache":
        cache.put("resp_parent", cached_parent(request))
    p = Recorded(request, context(pipeline, cache), "resp_1")
    await run_recorded(pipeline, p, engine.res)
    stages: list[Stage] = list(each_stage(pipeline.steps))
    for stage in stages:
        assert p.reads.get(stage, set()) <= stage.inputs | {stage.output}, stage.name
        assert stage.output in STAGE_OUTPUTS
    assert not any(p.writes.get(stage) for stage in stages)  # outputs come back from run
    assert p.writes["pipeline"] == {s.output for s in stages if s.applies(p)}


def test_a_request_picks_a_pipeline_only_when_allowed() -> None:
    assert pipeline_named(None, SPRINT, True) is SPRINT
    assert pipeline_named("legacy", SPRINT, False) is SPRINT
    assert pipeline_named(" Connection ", SPRINT, True) is CONNECTION
    with pytest.raises(ApiError) as err:
        pipeline_named("fast", SPRINT, True)
    assert err.value.status == 400 and err.value.param == "X-Turnpike-Pipeline"
    assert err.value.code == "invalid_value"
    assert err.value.message == (
        "Unknown pipeline 'fast'; expected one of: legacy, sprint, connection."
    )
