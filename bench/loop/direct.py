"""The lower bound's preparation: every turn's ``GenerateRequest``, built before the timed
loop, exactly as the gateway would build it (same item conversion, same rendering, the
model's speed from the model registry), so the timed loop does nothing but talk to the
worker and "run" the tools.

The requests of later turns contain the model's earlier answers. The simulator is
deterministic (``turnpike.worker.answers.plan_answer``), so they are predicted here and checked
against what the worker really says during the loop. Only the call ids differ from a
live conversation (the worker draws them at random); they are not rendered into the
prompt and do not influence the answer.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import grpc

from bench.loop.rollout import Rollout
from turnpike import token_bytes
from turnpike.gateway.protocol.items import normalize_input, to_proto
from turnpike.gateway.protocol.request import parse_create
from turnpike.inference.v1 import inference_pb2
from turnpike.router.registry import ModelRegistry, load_models
from turnpike.router.v1 import router_pb2, router_pb2_grpc
from turnpike.tokenizer.render import Renderer
from turnpike.worker.answer_kinds import FunctionCallAnswer
from turnpike.worker.answers import plan_answer


@dataclass(frozen=True)
class DirectPlan:
    requests: list[inference_pb2.GenerateRequest]  # one per turn
    answers: list[tuple[str, str] | None]  # (name, arguments) of each turn's call; None: message


@functools.cache
def renderer() -> Renderer:
    return Renderer()


@functools.cache
def registry() -> ModelRegistry:
    return ModelRegistry(load_models())


def build_plan(rollout: Rollout, model: str) -> DirectPlan:
    entry = registry().resolve(model)
    request = parse_create(
        {
            "model": model,
            "instructions": rollout.instructions,
            "tools": rollout.tools,
            "input": rollout.first_input(),
        },
        default_model=model,
    )
    tools = request.proto_tools
    call_names: dict[str, str] = {}
    items = to_proto(request.input_items, call_names)
    render = renderer()
    tokens = render.render(rollout.instructions, tools, items)
    requests: list[inference_pb2.GenerateRequest] = []
    answers: list[tuple[str, str] | None] = []
    for turn in range(1, rollout.turns + 1):
        requests.append(
            inference_pb2.GenerateRequest(
                request_id=f"{rollout.run_id}-turn{turn}",
                model=entry.id,
                prompt=token_bytes.pack(tokens + render.completion_prompt),
                instructions=rollout.instructions,
                items=items,
                tools=tools,
                tool_choice=request.tool_choice_name(),
                parallel_tool_calls=request.parallel_tool_calls,
                sampling=inference_pb2.SamplingParams(
                    temperature=request.temperature, top_p=request.top_p, seed=0
                ),
                tokens_per_second=entry.tokens_per_second,
                ttft_ms=entry.ttft_ms,
                prefill_tokens_per_second=entry.prefill_tokens_per_second,
                backend=entry.backend,
            )
        )
        answer = plan_answer(
            items, tools, request.tool_choice_name(), 0, render.count_text, rollout.instructions
        )
        if not isinstance(answer, FunctionCallAnswer):
            answers.append(None)
            if turn < rollout.turns:
                raise ValueError(f"turn {turn}: the simulator would answer with a message")
            break
        answers.append((answer.name, answer.arguments))
        if turn == rollout.turns:
            break
        call_id = f"call_{rollout.run_id}_{turn}"
        new = normalize_input(
            [
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": answer.name,
                    "arguments": answer.arguments,
                },
                *rollout.follow_up_input(turn + 1, call_id, answer.name),
            ]
        )
        new_proto = to_proto(new, call_names)
        items = items + new_proto
        tokens = tokens + render.render_append(new_proto)
    return DirectPlan(requests, answers)


async def route(router_address: str, model: str, affinity_key: str, prompt_tokens: int) -> str:
    """The worker the router would pick for this conversation (not timed)."""
    async with grpc.aio.insecure_channel(router_address) as channel:
        stub = router_pb2_grpc.RouterStub(channel)
        decision = await stub.Route(
            router_pb2.RouteRequest(
                model=registry().resolve(model).id,
                affinity_key=affinity_key,
                prompt_tokens=prompt_tokens,
            ),
            timeout=10,
        )
    return decision.worker_address
