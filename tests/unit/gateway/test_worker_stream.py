"""The gateway's reading of a worker's stream (turnpike.gateway.upstream.worker_stream), against a real gRPC
server: a stream that goes silent mid-generation (a worker cut off the network) is
cancelled once it has sent nothing for the bound, and the worker sees the cancel; one
that keeps talking is read to its end however long it lasts."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from turnpike.gateway.upstream.worker_stream import WorkerSilentError, worker_events
from turnpike.inference.v1 import inference_pb2, inference_pb2_grpc

SILENCE_S = 0.5


class Worker(inference_pb2_grpc.InferenceServicer):
    """Sends ``events`` deltas ``gap_s`` apart, then, if ``hang``, nothing until cancelled."""

    def __init__(self, events: int, gap_s: float, hang: bool) -> None:
        self.events, self.gap_s, self.hang = events, gap_s, hang
        self.cancelled = asyncio.Event()

    async def Generate(self, request, context):
        try:
            for _ in range(self.events):
                yield inference_pb2.GenerateEvent(delta=inference_pb2.Delta(text="x", tokens=1))
                await asyncio.sleep(self.gap_s)
            if self.hang:
                await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


async def read(worker: Worker) -> list:
    server = grpc.aio.server()
    inference_pb2_grpc.add_InferenceServicer_to_server(worker, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stream = inference_pb2_grpc.InferenceStub(channel).Generate(
                inference_pb2.GenerateRequest()
            )
            return [event async for event in worker_events(stream, SILENCE_S)]
    finally:
        await server.stop(None)


async def test_a_stream_silent_past_the_bound_is_cancelled() -> None:
    worker = Worker(events=3, gap_s=0.05, hang=True)
    with pytest.raises(WorkerSilentError):
        await asyncio.wait_for(read(worker), 30)
    await asyncio.wait_for(worker.cancelled.wait(), 10)  # the worker stops generating


async def test_a_stream_that_keeps_talking_outlives_the_bound() -> None:
    # Each gap is under the bound, and together they are well over it.
    worker = Worker(events=20, gap_s=SILENCE_S / 10, hang=False)
    events = await asyncio.wait_for(read(worker), 30)
    assert len(events) == 20
    assert not worker.cancelled.is_set()


async def test_a_reader_cancelled_from_outside_is_not_taken_for_silence() -> None:
    worker = Worker(events=1, gap_s=0, hang=True)
    task = asyncio.create_task(read(worker))
    await asyncio.sleep(SILENCE_S / 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(worker.cancelled.wait(), 10)
