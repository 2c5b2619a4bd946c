"""The worker's simulator backend driven in-process: a request with the tests' defaults, a
backend with its own prefix cache, and every event it streams for a request."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from turnpike import token_bytes
from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.worker.prefix_cache import PrefixCache
from turnpike.worker.simulator import SimulatorBackend


def user(text: str) -> cv.Item:
    return cv.Item(kind=cv.Item.MESSAGE, role="user", text=text)


def request(
    items: Iterable[cv.Item] | None = None,
    tools: Iterable[cv.Tool] = (),
    *,
    prompt: Iterable[int] = (),
    tps: float = 4000.0,
    ttft_ms: float = 1.0,
    prefill_tps: float = 1_000_000.0,
    max_output_tokens: int = 0,
    seed: int = 1,
    tool_choice: str = "",
    model: str = "turnpike-sim",
    tenant: str = "dev",
) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        request_id="resp_1",
        model=model,
        tenant=tenant,
        prompt=token_bytes.pack(prompt),
        items=items if items is not None else [user("Tell me about Zürich cafés ☕")],
        tools=list(tools),
        tool_choice=tool_choice,
        sampling=pb.SamplingParams(seed=seed, max_output_tokens=max_output_tokens),
        tokens_per_second=tps,
        ttft_ms=ttft_ms,
        prefill_tokens_per_second=prefill_tps,
    )


def make_backend(**kwargs: Any) -> SimulatorBackend:
    return SimulatorBackend("worker-test", PrefixCache(1_000_000), **kwargs)


async def run(backend: SimulatorBackend, req: pb.GenerateRequest) -> list[pb.GenerateEvent]:
    return [event async for event in backend.generate(req)]
