"""Worker (CPU simulator) over gRPC: pacing accuracy of the token stream, time to first
token with and without a prefix-cache hit, and the worker's CPU per turn of the agent
loop."""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from bench.loop.direct import build_plan
from bench.loop.rollout import Rollout, repo_corpus
from bench.loop.stack import cpu_seconds, pids_listening
from bench.services.common import (
    Context,
    Report,
    Series,
    Table,
    line_plot,
    log,
    ms,
    summarize,
)
from bench.services.history import tool_outputs
from turnpike import token_bytes
from turnpike.conversation.v1.conversation_pb2 import Item
from turnpike.grpc_client import insecure_channel
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.inference.v1 import inference_pb2_grpc

NEEDS = ("worker-1",)
MODEL = "turnpike-sim"
# The simulated model time of turnpike-sim in the router's models.json.
TTFT_MS = 50.0
PREFILL_TPS = 20_000.0
# (configured tokens/s, output tokens, runs): about 1-4 s of decode per run.
RATES = ((65, 260, 3), (1000, 2000, 3), (4000, 4000, 5))
QUICK_RATES = ((65, 20, 1), (1000, 200, 1), (4000, 400, 1))
# (prompt tokens, runs); each run is a miss (a fresh prompt) then a hit (the same prompt).
PROMPTS = ((1024, 5), (8192, 5), (32768, 5))
QUICK_PROMPTS = ((1024, 1), (4096, 1))
VOCAB = 199_000  # random prompt tokens are drawn below this id
# (rollouts, turns each) of the agent loop's own requests, as the gateway sends them; each
# rollout has instructions of its own, so it starts on a cold prefix cache.
LOOP = (4, 25)
QUICK_LOOP = (1, 4)

# The gateway names the backend from the router's model config; older stubs lack the field.
_BACKEND: dict[str, Any] = (
    {"backend": "simulator"} if "backend" in pb.GenerateRequest.DESCRIPTOR.fields_by_name else {}
)


@dataclass
class Stream:
    sent: float  # perf_counter() when the call started
    deltas: list[tuple[float, int]]  # (arrival, tokens) per Delta event
    finished: pb.Finished

    @property
    def tokens(self) -> int:
        return sum(tokens for _, tokens in self.deltas)

    @property
    def ttft_ms(self) -> float:
        return (self.deltas[0][0] - self.sent) * 1000


async def generate(stub: inference_pb2_grpc.InferenceStub, request: pb.GenerateRequest) -> Stream:
    sent = time.perf_counter()
    deltas: list[tuple[float, int]] = []
    finished = None
    async for event in stub.Generate(request):
        kind = event.WhichOneof("event")
        if kind == "delta":
            deltas.append((time.perf_counter(), event.delta.tokens))
        elif kind == "finished":
            finished = event.finished
        elif kind == "error":
            raise RuntimeError(f"worker error {event.error.code}: {event.error.message}")
    if finished is None or not deltas:
        raise RuntimeError("the stream ended without deltas or a Finished event")
    return Stream(sent, deltas, finished)


def request(
    prompt: list[int], items: list[Item], tps: float, max_output_tokens: int
) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        request_id="resp_bench",
        model=MODEL,
        prompt=token_bytes.pack(prompt),
        items=items,
        tool_choice="none",
        sampling=pb.SamplingParams(seed=1, max_output_tokens=max_output_tokens),
        tokens_per_second=tps,
        ttft_ms=TTFT_MS,
        prefill_tokens_per_second=PREFILL_TPS,
        **_BACKEND,
    )


def long_answer_items(tokens: int) -> list[Item]:
    """A conversation ending in many tool outputs: the simulator answers with one line
    (about 50 tokens) per output, so the answer has at least ``tokens`` tokens."""
    items = [
        Item(kind=Item.MESSAGE, role="user", text="Read every module and summarize each."),
        Item(kind=Item.FUNCTION_CALL, call_id="call_0", name="read_file", arguments="{}"),
    ]
    for text in tool_outputs(tokens // 40 + 4, chars=300):
        items.append(
            Item(kind=Item.FUNCTION_CALL_OUTPUT, call_id="call_0", name="read_file", text=text)
        )
    return items


def prompt(rng: random.Random, size: int) -> list[int]:
    return [rng.randrange(1, VOCAB) for _ in range(size)]


async def loop_cpu(
    stub: inference_pb2_grpc.InferenceStub, address: str, rollouts: int, turns: int
) -> dict | None:
    """The worker process's CPU (Linux ``/proc``) per turn of the agent loop: each
    rollout's requests one after the other, at the model's own speeds. None where the
    process cannot be found."""
    pid = pids_listening({int(address.rsplit(":", 1)[1]): "worker"}).get("worker")
    if pid is None:
        return None
    corpus = repo_corpus()
    plans = [
        build_plan(Rollout(f"worker-cpu-{i}", corpus, turns=turns), MODEL) for i in range(rollouts)
    ]
    requests = [request for plan in plans for request in plan.requests]
    tokens = deltas = 0
    before = cpu_seconds(pid)
    for request in requests:
        stream = await generate(stub, request)
        tokens += stream.tokens
        deltas += len(stream.deltas)
    after = cpu_seconds(pid)
    if before is None or after is None:
        return None
    cpu_ms = (after - before) * 1000
    return {
        "rollouts": rollouts,
        "turns": len(requests),
        "tokens_per_second": requests[0].tokens_per_second,
        "output_tokens_per_turn": round(tokens / len(requests), 1),
        "deltas_per_turn": round(deltas / len(requests), 2),
        "cpu_ms": round(cpu_ms, 1),
        "cpu_ms_per_turn": round(cpu_ms / len(requests), 2),
        "cpu_us_per_output_token": round(cpu_ms * 1000 / tokens, 1),
    }


async def run(ctx: Context) -> Report:
    began = time.monotonic()
    rng = random.Random(11)
    pacing, ttft = [], []
    async with insecure_channel(ctx.addresses["worker-1"]) as channel:
        stub = inference_pb2_grpc.InferenceStub(channel)
        hello = [Item(kind=Item.MESSAGE, role="user", text="Say hello.")]
        await generate(stub, request(prompt(rng, 64), hello, 1000, 4))  # warm the channel

        for tps, tokens, runs in ctx.pick(RATES, QUICK_RATES):
            client, worker, per_delta, received = [], [], [], []
            for _ in range(runs):
                req = request(prompt(rng, 256), long_answer_items(tokens), tps, tokens)
                stream = await generate(stub, req)
                first_tokens = stream.deltas[0][1]
                paced = stream.tokens - first_tokens  # tokens due after the first delta's
                span = stream.deltas[-1][0] - stream.deltas[0][0]
                client.append(paced / span)
                worker.append(paced / (stream.finished.timings.decode_ms / 1000))
                per_delta.append(stream.tokens / len(stream.deltas))
                received.append(stream.tokens)
            pacing.append(
                {
                    "configured_tokens_per_s": tps,
                    "output_tokens": statistics.median(received),
                    "client_tokens_per_s": summarize(client, digits=2),
                    "worker_tokens_per_s": summarize(worker, digits=2),
                    "tokens_per_delta": summarize(per_delta, digits=2),
                    "client_ratio": round(statistics.median(client) / tps, 4),
                    "worker_ratio": round(statistics.median(worker) / tps, 4),
                }
            )
            log(
                f"worker pacing {tps:5} tok/s x {tokens} tokens, {runs} runs: client "
                f"{statistics.median(client):.1f} tok/s ({pacing[-1]['client_ratio']:.3f}x), "
                f"worker {statistics.median(worker):.1f} tok/s"
            )

        for size, runs in ctx.pick(PROMPTS, QUICK_PROMPTS):
            samples: dict[str, list[float]] = {
                "miss_client": [],
                "miss_worker": [],
                "hit_client": [],
                "hit_worker": [],
            }
            cached = {"miss": 0, "hit": 0}
            for _ in range(runs):
                tokens = prompt(rng, size)
                for case in ("miss", "hit"):  # the same prompt twice: the second one hits
                    stream = await generate(stub, request(tokens, hello, 1000, 1))
                    samples[f"{case}_client"].append(stream.ttft_ms)
                    samples[f"{case}_worker"].append(stream.finished.timings.ttft_ms)
                    cached[case] = stream.finished.usage.cached_tokens
            point = {"prompt_tokens": size}
            for key, values in samples.items():
                point[f"{key}_ttft_ms"] = summarize(values)
            for case in ("miss", "hit"):
                point[f"{case}_cached_tokens"] = cached[case]
                expected = TTFT_MS + (size - cached[case]) / PREFILL_TPS * 1000
                point[f"{case}_model_ttft_ms"] = round(expected, 2)
                point[f"{case}_overhead_ms"] = round(
                    point[f"{case}_client_ttft_ms"]["median"] - expected, 2
                )
            ttft.append(point)
            log(
                f"worker ttft prompt={size:6}: miss {ms(point['miss_client_ttft_ms'])} ms "
                f"(model {point['miss_model_ttft_ms']}), hit {ms(point['hit_client_ttft_ms'])} ms "
                f"(model {point['hit_model_ttft_ms']}, {cached['hit']} cached)"
            )

        cpu = await loop_cpu(stub, ctx.addresses["worker-1"], *ctx.pick(LOOP, QUICK_LOOP))
        if cpu is not None:
            log(
                f"worker cpu per agent-loop turn: {cpu['cpu_ms_per_turn']} ms over "
                f"{cpu['turns']} turns ({cpu['deltas_per_turn']} deltas a turn)"
            )
    return _report(ctx, pacing, ttft, cpu, time.monotonic() - began)


def _report(
    ctx: Context, pacing: list[dict], ttft: list[dict], cpu: dict | None, duration: float
) -> Report:
    derived: dict = {}
    for p in pacing:
        derived[f"pacing_client_ratio_at_{p['configured_tokens_per_s']}"] = p["client_ratio"]
    for p in pacing:
        derived[f"pacing_worker_ratio_at_{p['configured_tokens_per_s']}"] = p["worker_ratio"]
    largest = ttft[-1]
    derived[f"ttft_miss_ms_at_{largest['prompt_tokens']}"] = largest["miss_client_ttft_ms"][
        "median"
    ]
    derived[f"ttft_hit_ms_at_{largest['prompt_tokens']}"] = largest["hit_client_ttft_ms"]["median"]
    derived[f"ttft_hit_speedup_at_{largest['prompt_tokens']}"] = round(
        largest["miss_client_ttft_ms"]["median"] / largest["hit_client_ttft_ms"]["median"], 1
    )
    derived["ttft_overhead_ms_median_over_sizes"] = round(
        statistics.median(p[f"{c}_overhead_ms"] for p in ttft for c in ("miss", "hit")), 2
    )
    if cpu is not None:
        derived["loop_cpu_ms_per_turn"] = cpu["cpu_ms_per_turn"]
        derived["loop_cpu_us_per_output_token"] = cpu["cpu_us_per_output_token"]
        derived["loop_deltas_per_turn"] = cpu["deltas_per_turn"]

    ratios = ", ".join(f"{p['client_ratio']:.3f} at {p['configured_tokens_per_s']}" for p in pacing)
    speedup = largest["miss_client_ttft_ms"]["median"] / largest["hit_client_ttft_ms"]["median"]
    headline = [
        f"Pacing: achieved / configured tokens/s at the gRPC client is {ratios} tok/s.",
        f"Time to first token at {largest['prompt_tokens']:,} prompt tokens: "
        f"{largest['miss_client_ttft_ms']['median']:.0f} ms on a cache miss, "
        f"{largest['hit_client_ttft_ms']['median']:.0f} ms on a hit "
        f"({speedup:.1f}x); measured minus "
        f"simulated model time is {derived['ttft_overhead_ms_median_over_sizes']:.1f} ms (median "
        "over all points).",
    ]
    if cpu is not None:
        headline.append(
            f"CPU of the worker process per agent-loop turn at {cpu['tokens_per_second']:,.0f} "
            f"tokens/s: {cpu['cpu_ms_per_turn']:.2f} ms ({cpu['output_tokens_per_turn']:g} "
            f"output tokens in {cpu['deltas_per_turn']:g} deltas a turn)."
        )
    pacing_table = Table(
        "Pacing: achieved vs configured decode speed",
        [
            "configured tok/s",
            "output tokens",
            "runs",
            "client tok/s",
            "client / configured",
            "worker tok/s",
            "worker / configured",
            "tokens per delta",
        ],
        [
            [
                p["configured_tokens_per_s"],
                int(p["output_tokens"]),
                p["client_tokens_per_s"]["n"],
                f"{p['client_tokens_per_s']['median']:.1f}",
                f"{p['client_ratio']:.3f}",
                f"{p['worker_tokens_per_s']['median']:.1f}",
                f"{p['worker_ratio']:.3f}",
                f"{p['tokens_per_delta']['median']:.1f}",
            ]
            for p in pacing
        ],
        "Client: tokens after the first delta / time from first to last delta, at the gRPC "
        "client. Worker: the same tokens / the worker-reported `decode_ms`.",
    )
    ttft_table = Table(
        "Time to first token in ms, median (p90): cache miss vs hit",
        [
            "prompt tokens",
            "runs",
            "miss client",
            "miss worker",
            "miss model",
            "hit client",
            "hit worker",
            "hit model",
            "hit cached tokens",
        ],
        [
            [
                p["prompt_tokens"],
                p["miss_client_ttft_ms"]["n"],
                ms(p["miss_client_ttft_ms"], 1),
                ms(p["miss_worker_ttft_ms"], 1),
                f"{p['miss_model_ttft_ms']:.1f}",
                ms(p["hit_client_ttft_ms"], 1),
                ms(p["hit_worker_ttft_ms"], 1),
                f"{p['hit_model_ttft_ms']:.1f}",
                p["hit_cached_tokens"],
            ]
            for p in ttft
        ],
        f"Model = the simulated time alone: {TTFT_MS:g} ms + uncached prompt tokens at "
        f"{PREFILL_TPS:,.0f} tokens/s. Client = send to first delta at the gRPC client; "
        "worker = the worker-reported `ttft_ms` (receipt to first delta).",
    )
    tables = [pacing_table, ttft_table]
    if cpu is not None:
        tables.append(
            Table(
                "CPU of the worker process per agent-loop turn",
                [
                    "rollouts",
                    "turns",
                    "tokens/s",
                    "output tokens a turn",
                    "deltas a turn",
                    "CPU ms a turn",
                    "CPU µs per output token",
                ],
                [
                    [
                        cpu["rollouts"],
                        cpu["turns"],
                        f"{cpu['tokens_per_second']:,.0f}",
                        cpu["output_tokens_per_turn"],
                        cpu["deltas_per_turn"],
                        f"{cpu['cpu_ms_per_turn']:.2f}",
                        f"{cpu['cpu_us_per_output_token']:.0f}",
                    ]
                ],
                "The agent loop's requests (`bench/loop/direct.py`: as the gateway builds them, "
                "history growing each turn), one turn after the other; CPU = user + system time "
                "of the worker process from `/proc`, in 10 ms ticks, over all turns.",
                text_columns=0,
            )
        )
    plot = "worker_ttft.png"
    sizes = [p["prompt_tokens"] for p in ttft]
    line_plot(
        ctx.out_dir / plot,
        "Worker: time to first token, prefix-cache miss vs hit",
        "prompt tokens",
        "time to first token (ms, median)",
        [
            Series("miss, measured", sizes, [p["miss_client_ttft_ms"]["median"] for p in ttft]),
            Series("miss, model time", sizes, [p["miss_model_ttft_ms"] for p in ttft], "k--"),
            Series("hit, measured", sizes, [p["hit_client_ttft_ms"]["median"] for p in ttft], "s-"),
            Series("hit, model time", sizes, [p["hit_model_ttft_ms"] for p in ttft], "k:"),
        ],
    )
    return Report(
        service="worker",
        title="Worker: pacing accuracy, time to first token and CPU per agent-loop turn",
        summary=(
            "A `python -m turnpike.worker` process (the CPU simulator) called over gRPC, one stream at "
            "a time. Pacing: answers cut to a fixed number of tokens by `max_output_tokens`, "
            "decoded at the configured speed. Time to first token: a fresh random prompt "
            "(every block a cache miss), then the same prompt again (a prefix-cache hit). CPU: "
            "the agent loop's requests replayed turn by turn."
        ),
        params={
            "model": MODEL,
            "ttft_ms": TTFT_MS,
            "prefill_tokens_per_s": PREFILL_TPS,
            "rates": [list(r) for r in ctx.pick(RATES, QUICK_RATES)],
            "prompts": [list(p) for p in ctx.pick(PROMPTS, QUICK_PROMPTS)],
            "loop": list(ctx.pick(LOOP, QUICK_LOOP)),
        },
        measurements=[{"kind": "pacing", **p} for p in pacing]
        + [{"kind": "ttft", **p} for p in ttft]
        + ([{"kind": "loop_cpu", **cpu}] if cpu is not None else []),
        derived=derived,
        headline=headline,
        tables=tables,
        plots=[plot],
        duration_s=duration,
    )
