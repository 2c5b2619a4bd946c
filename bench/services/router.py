"""Router: routing decisions per second in-process (``turnpike.router.routing``), and the Route RPC's
latency and throughput against a router process with two real workers."""

from __future__ import annotations

import asyncio
import statistics
import time

import grpc

from bench.services.common import (
    Budget,
    Context,
    Report,
    Table,
    log,
    ms,
    rate,
    sample,
    summarize,
)
from turnpike.grpc_client import insecure_channel
from turnpike.router.routing import Worker, WorkerRouter
from turnpike.router.v1 import router_pb2, router_pb2_grpc

NEEDS = ("router", "worker-1", "worker-2")
MODEL = "turnpike-sim"
CONVERSATIONS = 1000  # distinct affinity keys in the "follow-up" scenario
PROMPT_TOKENS = 8000
CONCURRENCY = (1, 8, 32)


def _router() -> WorkerRouter:
    workers = [Worker("worker-1", "127.0.0.1:1", True), Worker("worker-2", "127.0.0.1:2", True)]
    return WorkerRouter(workers)


async def in_process(ctx: Context) -> list[dict]:
    """Decisions/s for three kinds of traffic, each timed in batches of ``batch`` routes."""
    batch = ctx.pick(20_000, 2_000)
    results = []
    router = _router()
    follow_ups = [f"resp_conv{i}" for i in range(CONVERSATIONS)]
    for key in follow_ups:
        router.route(key, PROMPT_TOKENS)
    counter = iter(range(10**9))

    def new_conversations() -> None:
        base = next(counter) * batch
        for i in range(batch):
            router.route(f"resp_new{base + i}", PROMPT_TOKENS)

    def follow_up() -> None:
        for i in range(batch):
            router.route(follow_ups[i % CONVERSATIONS], PROMPT_TOKENS)

    def no_key() -> None:
        for _ in range(batch):
            router.route("", PROMPT_TOKENS)

    scenarios = {
        "new_conversation": ("new conversation", new_conversations),
        "follow_up": ("follow-up (affinity hit)", follow_up),
        "no_key": ("no affinity key", no_key),
    }
    budget = Budget(min_n=ctx.pick(5, 2), max_n=ctx.pick(20, 3), seconds=ctx.pick(1.0, 0.05))
    timed = await sample({key: fn for key, (_, fn) in scenarios.items()}, budget)
    for key, (name, _) in scenarios.items():
        samples = timed[key]
        per_decision = summarize([s / batch for s in samples], 1e6, digits=3)
        results.append(
            {
                "transport": "in-process",
                "scenario": key,
                "traffic": name,
                "batch": batch,
                "decision_us": per_decision,
                "decisions_per_s": round(batch / statistics.median(samples)),
            }
        )
        log(
            f"router in-process {name:25}: {per_decision['median']:.2f} us/decision, "
            f"{rate(results[-1]['decisions_per_s'])} decisions/s ({len(samples)} x {batch})"
        )
    return results


async def _wait_routable(stub: router_pb2_grpc.RouterStub) -> None:
    """Until the router has seen a worker healthy (its first health round)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            await stub.Route(router_pb2.RouteRequest(model=MODEL))
            return
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def over_grpc(ctx: Context) -> list[dict]:
    results = []
    async with insecure_channel(ctx.addresses["router"]) as channel:
        stub = router_pb2_grpc.RouterStub(channel)
        await _wait_routable(stub)
        requests = [
            router_pb2.RouteRequest(
                model=MODEL, affinity_key=f"resp_conv{i}", prompt_tokens=PROMPT_TOKENS
            )
            for i in range(CONVERSATIONS)
        ]
        turn = iter(range(10**9))

        async def one() -> None:
            await stub.Route(requests[next(turn) % CONVERSATIONS])

        budget = Budget(
            min_n=ctx.pick(200, 30), max_n=ctx.pick(3000, 100), seconds=ctx.pick(1.0, 0.05)
        )
        samples = (await sample({"route": one}, budget, warmup=20))["route"]
        latency = summarize(samples, 1000, digits=3)
        results.append(
            {
                "transport": "grpc",
                "scenario": "sequential Route",
                "concurrency": 1,
                "latency_ms": latency,
                "calls_per_s": round(len(samples) / sum(samples)),
            }
        )
        log(f"router grpc sequential Route: {ms(latency, 3)} ms ({latency['n']} calls)")

        calls = ctx.pick(3000, 100)
        for concurrency in CONCURRENCY[1:]:
            per_call: list[float] = []

            async def caller(count: int, latencies: list[float] = per_call) -> None:
                for _ in range(count):
                    start = time.perf_counter()
                    await one()
                    latencies.append(time.perf_counter() - start)

            walls = []
            for _ in range(ctx.pick(3, 1)):
                start = time.perf_counter()
                await asyncio.gather(*(caller(calls // concurrency) for _ in range(concurrency)))
                walls.append(time.perf_counter() - start)
            done = calls // concurrency * concurrency
            wall = statistics.median(walls)
            latency = summarize(per_call, 1000, digits=3)
            results.append(
                {
                    "transport": "grpc",
                    "scenario": "concurrent Route",
                    "concurrency": concurrency,
                    "calls_per_round": done,
                    "rounds": len(walls),
                    "latency_ms": latency,
                    "calls_per_s": round(done / wall),
                }
            )
            log(
                f"router grpc concurrency {concurrency:3}: {rate(done / wall)} routes/s, "
                f"latency {ms(latency, 3)} ms"
            )
    return results


async def run(ctx: Context) -> Report:
    began = time.monotonic()
    local = await in_process(ctx)
    remote = await over_grpc(ctx)
    derived = {f"in_process_decisions_per_s_{m['scenario']}": m["decisions_per_s"] for m in local}
    derived["grpc_route_p50_ms"] = remote[0]["latency_ms"]["median"]
    derived["grpc_route_p90_ms"] = remote[0]["latency_ms"]["p90"]
    derived["grpc_routes_per_s_best"] = max(m["calls_per_s"] for m in remote)
    by_key = {m["scenario"]: m for m in local}
    concurrent = max(remote, key=lambda m: m["calls_per_s"])
    headline = [
        f"In-process: {rate(by_key['follow_up']['decisions_per_s'])} decisions/s for "
        f"follow-ups ({by_key['follow_up']['decision_us']['median']:.1f} us each), "
        f"{rate(by_key['new_conversation']['decisions_per_s'])}/s for new conversations.",
        f"Route RPC: {remote[0]['latency_ms']['median']:.2f} ms median "
        f"({remote[0]['latency_ms']['p90']:.2f} ms p90) one call at a time; "
        f"{rate(concurrent['calls_per_s'])} routes/s with {concurrent['concurrency']} callers.",
    ]
    tables = [
        Table(
            "In-process routing decisions (`WorkerRouter.route`, 2 healthy workers)",
            ["traffic", "us per decision, median (p90)", "decisions/s"],
            [[m["traffic"], ms(m["decision_us"], 2), rate(m["decisions_per_s"])] for m in local],
            f"Each sample times a batch of {local[0]['batch']:,} routes with "
            f"{PROMPT_TOKENS} prompt tokens each; the load window keeps every route of the "
            "last 10 s.",
        ),
        Table(
            "Route RPC against a router process (2 worker processes behind it)",
            ["callers", "latency ms, median (p90)", "routes/s"],
            [[m["concurrency"], ms(m["latency_ms"], 3), rate(m["calls_per_s"])] for m in remote],
            f"Follow-up traffic over {CONVERSATIONS} conversations; one channel shared by "
            "all callers. The Python gRPC client shares the 2 CPUs with the router, so the "
            "routes/s are a floor for what the router itself can serve.",
        ),
    ]
    return Report(
        service="router",
        title="Router: decision time",
        summary=(
            "How long the router takes to pick a worker: the pure `turnpike.router.routing` decision "
            "in-process, and the `Route` RPC (model resolution + decision + reply) against a "
            "`python -m turnpike.router` process polling two `python -m turnpike.worker` processes' health."
        ),
        params={
            "model": MODEL,
            "conversations": CONVERSATIONS,
            "prompt_tokens": PROMPT_TOKENS,
            "concurrency": list(CONCURRENCY),
        },
        measurements=local + remote,
        derived=derived,
        headline=headline,
        tables=tables,
        duration_s=time.monotonic() - began,
    )
