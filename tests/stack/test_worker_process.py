"""The worker as a real process over gRPC, including SIGTERM with a stream in flight, and
its metrics (served by the process, and recorded in process)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from typing import Any

import grpc
import httpx
import jsonschema
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.metric_samples import Delta
from support.procs import free_port

from turnpike import token_bytes
from turnpike.backend_names import SIMULATOR
from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.grpc_client import wait_healthy
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.inference.v1 import inference_pb2_grpc
from turnpike.worker.backends import Backends
from turnpike.worker.prefix_cache import PrefixCache
from turnpike.worker.server import SERVICE_NAME, InferenceServicer
from turnpike.worker.simulator import SimulatorBackend

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "recursive": {"type": "boolean"}},
    "required": ["path", "recursive"],
    "additionalProperties": False,
}


def request(tps: float = 2000.0, **kwargs) -> pb.GenerateRequest:
    fields: dict[str, Any] = {
        "request_id": "resp_proc",
        "model": "turnpike-sim",
        "prompt": token_bytes.pack(range(500)),
        "items": [cv.Item(kind=cv.Item.MESSAGE, role="user", text="List the files in src/app")],
        "sampling": pb.SamplingParams(seed=4),
        "tokens_per_second": tps,
        "ttft_ms": 5.0,
        "prefill_tokens_per_second": 50_000.0,
    }
    fields.update(kwargs)
    return pb.GenerateRequest(**fields)


@pytest.fixture
def worker(start_worker):
    return start_worker()


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=10)


async def test_worker_process_generates_and_exits_cleanly(worker) -> None:
    proc, address = worker
    assert await wait_healthy(address, timeout=30, service=SERVICE_NAME)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = inference_pb2_grpc.InferenceStub(channel)

        tools = [
            cv.Tool(name="list_files", description="List files", parameters_json=json.dumps(SCHEMA))
        ]
        events = [e async for e in stub.Generate(request(tools=tools), timeout=10)]
        assert events[0].item_started.name == "list_files"
        arguments = "".join(e.delta.text for e in events if e.HasField("delta"))
        jsonschema.validate(json.loads(arguments), SCHEMA)
        assert json.loads(arguments)["path"] == "src/app"
        finished = events[-1].finished
        assert finished.finish_reason == "tool_calls" and finished.worker_id == "worker-proc"
        assert finished.usage.input_tokens == 500

        # The same prompt again hits this worker's prefix cache.
        again = [e async for e in stub.Generate(request(), timeout=10)]
        assert again[-1].finished.usage.cached_tokens == 448

        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in stub.Generate(request(tps=0.0), timeout=10):
                pass
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "tokens_per_second" in info.value.details()

        # A caller that drops its stream: the worker carries on serving others.
        call = stub.Generate(request(tps=10.0), timeout=10)
        async for event in call:
            if event.HasField("delta"):
                break
        call.cancel()
        quick = [e async for e in stub.Generate(request(), timeout=10)]
        assert quick[-1].HasField("finished")

        # Batched: the same events, those due at once in one message (a call's start and
        # its first delta; its end and the finish), and an invalid request still refused.
        one_by_one = [e async for e in stub.Generate(request(tools=tools), timeout=10)]
        batches = [b async for b in stub.GenerateBatched(request(tools=tools), timeout=10)]
        batched = [e for b in batches for e in b.events]
        kinds = [e.WhichOneof("event") for e in batched]
        assert kinds[0] == "item_started" and kinds[-2:] == ["item_done", "finished"]
        assert set(kinds) == {e.WhichOneof("event") for e in one_by_one}
        text = "".join(e.delta.text for e in batched)
        assert text == "".join(e.delta.text for e in one_by_one)  # (deltas cut by time)
        assert len(batches) < len(batched)
        last = [e.WhichOneof("event") for e in batches[-1].events]
        assert last[-2:] == ["item_done", "finished"]  # due together: one message
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in stub.GenerateBatched(request(tps=0.0), timeout=10):
                pass
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    assert stop(proc) == 0


async def test_sigterm_lets_an_inflight_stream_finish(worker) -> None:
    proc, address = worker
    assert await wait_healthy(address, timeout=30, service=SERVICE_NAME)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = inference_pb2_grpc.InferenceStub(channel)
        call = stub.Generate(request(tps=65.0), timeout=15)  # ~0.3-1 s of decode
        events = []
        async for event in call:
            events.append(event)
            if event.HasField("delta") and len(events) == 2:
                proc.send_signal(signal.SIGTERM)
        assert events[-1].HasField("finished")
        assert events[-1].finished.usage.output_tokens == sum(
            e.delta.tokens for e in events if e.HasField("delta")
        )
        assert events[-1].finished.usage.output_tokens > 10
    assert await asyncio.to_thread(proc.wait, 10) == 0


async def test_stall_knob_hangs_a_stream_and_shutdown_still_ends_it(start_worker) -> None:
    proc, address = start_worker(
        TURNPIKE_WORKER_STALL_AFTER_TOKENS="3", TURNPIKE_SHUTDOWN_GRACE_S="0.5"
    )
    assert await wait_healthy(address, timeout=30, service=SERVICE_NAME)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = inference_pb2_grpc.InferenceStub(channel)
        events = []
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for event in stub.Generate(request(), timeout=1.0):
                events.append(event)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert sum(e.delta.tokens for e in events if e.HasField("delta")) == 3

        stalled = stub.Generate(request(), timeout=10)
        async for event in stalled:
            if event.HasField("delta"):
                break
        proc.send_signal(signal.SIGTERM)  # the stalled stream is cut after the grace period
        assert await asyncio.to_thread(proc.wait, 10) == 0
        stalled.cancel()


async def test_bad_configuration_exits_with_message(start_worker) -> None:
    proc, _ = start_worker(TURNPIKE_WORKER_ERROR_RATE="2")
    assert await asyncio.to_thread(proc.wait, 30) == 2


@pytest.mark.parametrize(("interval_ms", "per_token"), [("0", True), ("20", False)])
async def test_the_stream_interval_is_a_setting(start_worker, interval_ms, per_token) -> None:
    """TURNPIKE_WORKER_DELTA_INTERVAL_MS=0 streams every token as it is due; the default
    groups the tokens of 20 ms (at most 20) after the first, alone."""
    _, address = start_worker(TURNPIKE_WORKER_DELTA_INTERVAL_MS=interval_ms)
    assert await wait_healthy(address, timeout=30, service=SERVICE_NAME)
    long_answer = [cv.Item(kind=cv.Item.MESSAGE, role="user", text="A story in 120 words")]
    async with grpc.aio.insecure_channel(address) as channel:
        stub = inference_pb2_grpc.InferenceStub(channel)
        events = [e async for e in stub.Generate(request(tps=1000.0, items=long_answer))]
    deltas = [e.delta for e in events if e.HasField("delta")]
    tokens = events[-1].finished.usage.output_tokens
    # (What the first delta holds depends on how late a busy machine wakes the pacer;
    # tests/unit/worker/test_worker_pacing.py checks it on a clock of its own.)
    assert sum(d.tokens for d in deltas) == tokens > 100
    if per_token:
        assert len(deltas) > tokens / 3  # a late wake-up may find two or three due
    else:
        # Grouped: a delta waits for its 20 tokens (a late wake-up on a busy machine may
        # find more due, so no upper bound here; the pacing tests check it on virtual time).
        assert len(deltas) <= 2 + tokens / 20


# Every name the worker serves, as the text format types it (a counter's family drops
# its ``_total``).
WORKER_FAMILIES = {
    "turnpike_worker_prefill_tokens": "counter",
    "turnpike_worker_output_tokens": "counter",
    "turnpike_worker_prefill_tokens_per_second": "histogram",
    "turnpike_worker_decode_tokens_per_second": "histogram",
    "turnpike_worker_prefix_cache_lookups": "counter",
    "turnpike_worker_prefix_cache_hit_tokens": "counter",
    "turnpike_worker_queue_depth": "gauge",
    "turnpike_worker_running_requests": "gauge",
    "turnpike_grpc_server_handling_seconds": "histogram",
    "turnpike_grpc_server_handled": "counter",
}


def paced(*streams: list) -> int:
    """The streams with a decode rate: tokens after the first delta. On a busy machine a
    late first wake-up may find every token due at once, and that stream has none."""
    return sum(sum(e.HasField("delta") for e in events) > 1 for events in streams)


async def test_worker_process_serves_its_metrics(start_worker) -> None:
    metrics_port = free_port()
    _, address = start_worker(TURNPIKE_WORKER_METRICS_PORT=str(metrics_port))
    assert await wait_healthy(address, timeout=30, service=SERVICE_NAME)
    async with grpc.aio.insecure_channel(address) as channel:
        stub = inference_pb2_grpc.InferenceStub(channel)
        first = [e async for e in stub.Generate(request(), timeout=10)]
        again = [e async for e in stub.Generate(request(), timeout=10)]  # 448 tokens cached
    async with httpx.AsyncClient() as client:
        reply = await client.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5)
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain")

    families = {family.name: family for family in text_string_to_metric_families(reply.text)}
    assert {name: families[name].type for name in WORKER_FAMILIES} == WORKER_FAMILIES
    values = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in families.values()
        for s in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return values[(name, tuple(sorted(labels.items())))]

    sim = {"backend": "simulator"}
    output = first[-1].finished.usage.output_tokens + again[-1].finished.usage.output_tokens
    assert value("turnpike_worker_prefill_tokens_total", **sim) == 500 + (500 - 448)
    assert value("turnpike_worker_output_tokens_total", **sim) == output
    lookups = "turnpike_worker_prefix_cache_lookups_total"
    assert value(lookups, result="miss", **sim) == value(lookups, result="hit", **sim) == 1
    assert value("turnpike_worker_prefix_cache_hit_tokens_total", **sim) == 448
    assert value("turnpike_worker_prefill_tokens_per_second_count", **sim) == 2
    assert value("turnpike_worker_decode_tokens_per_second_count", **sim) == paced(first, again)
    assert value("turnpike_worker_queue_depth", **sim) == 0
    assert value("turnpike_worker_running_requests", **sim) == 0
    rpc = {"grpc_service": SERVICE_NAME, "grpc_method": "Generate"}
    assert value("turnpike_grpc_server_handled_total", grpc_code="OK", **rpc) == 2


async def test_a_request_waits_then_runs_and_its_work_is_counted() -> None:
    """In process: the gauges while one request waits for its first token and streams, and
    the counters and rates once it finished."""
    simulator = SimulatorBackend("worker-in-process", PrefixCache(100_000))
    servicer = InferenceServicer(Backends({SIMULATOR: simulator}))
    sim = {"backend": SIMULATOR}
    waiting = Delta("turnpike_worker_queue_depth", **sim)
    running = Delta("turnpike_worker_running_requests", **sim)
    prefilled = Delta("turnpike_worker_prefill_tokens_total", **sim)
    output = Delta("turnpike_worker_output_tokens_total", **sim)
    lookups = "turnpike_worker_prefix_cache_lookups_total"
    hits, misses = Delta(lookups, result="hit", **sim), Delta(lookups, result="miss", **sim)
    hit_tokens = Delta("turnpike_worker_prefix_cache_hit_tokens_total", **sim)
    prefill_rates = Delta("turnpike_worker_prefill_tokens_per_second_count", **sim)
    decode_rates = Delta("turnpike_worker_decode_tokens_per_second_count", **sim)
    decode_sum = Delta("turnpike_worker_decode_tokens_per_second_sum", **sim)

    stream = servicer.Generate(request(tps=1000.0, ttft_ms=300.0), None)
    first = asyncio.ensure_future(anext(stream))
    for _ in range(200):  # the first token is 300 ms away
        if waiting.change:
            break
        await asyncio.sleep(0.001)
    assert (waiting.change, running.change) == (1, 0) and not first.done()
    events = [await first, await anext(stream)]  # the item starts with its first token
    assert events[-1].HasField("delta") and (waiting.change, running.change) == (0, 1)
    events += [event async for event in stream]
    assert (waiting.change, running.change) == (0, 0)
    assert prefilled.change == 500 and (misses.change, hits.change) == (1, 0)

    again = [event async for event in servicer.Generate(request(tps=1000.0), None)]
    assert again[-1].finished.usage.cached_tokens == hit_tokens.change == 448
    assert (misses.change, hits.change) == (1, 1)
    assert prefilled.change == 500 + 52
    assert output.change == sum(e.finished.usage.output_tokens for e in (events[-1], again[-1]))
    assert prefill_rates.change == 2
    streams = paced(events, again)
    assert decode_rates.change == streams
    # The tokens after the first delta over the time after it: at most the model's speed (a
    # token leaves no earlier than due, later when the event loop wakes late).
    assert not streams or 0 < decode_sum.change / streams < 1_200
