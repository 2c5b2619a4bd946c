"""The gateway asks a worker for batched events (GenerateBatched); a worker from before
that method (a rolling deploy) answers UNIMPLEMENTED, and is then asked by Generate, the
response unharmed. Against real gRPC servers in process, with stand-ins for the rest."""

from __future__ import annotations

import grpc
import pytest
from support.billing_standin import recording_outbox
from support.gateway_standins import StandIns, create, prepare, resources

from turnpike.gateway.engine.event_queue import ResponseEventQueue
from turnpike.gateway.engine.generation import Generation, StepEnd, WorkerGeneration
from turnpike.gateway.engine.response_engine import ResponseEngine
from turnpike.gateway.pipeline.variants import SPRINT
from turnpike.gateway.protocol.events import ResponseEvents
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.inference.v1 import inference_pb2_grpc

ANSWER = [
    pb.GenerateEvent(item_started=pb.ItemStarted(kind=pb.ItemStarted.MESSAGE)),
    pb.GenerateEvent(delta=pb.Delta(text="Hi", tokens=1)),
    pb.GenerateEvent(item_done=pb.ItemDone()),
    pb.GenerateEvent(finished=pb.Finished(finish_reason="stop", usage=pb.Usage(output_tokens=1))),
]


class OldWorker(inference_pb2_grpc.InferenceServicer):
    """A worker from before GenerateBatched: the base class answers it UNIMPLEMENTED."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def Generate(self, request, context):
        self.asked.append("Generate")
        for event in ANSWER:
            yield event


class NewWorker(OldWorker):
    async def GenerateBatched(self, request, context):
        self.asked.append("GenerateBatched")
        yield pb.GenerateEvents(events=ANSWER[:2])
        yield pb.GenerateEvents(events=ANSWER[2:])


@pytest.mark.parametrize("worker", [OldWorker(), NewWorker()], ids=["old", "new"])
async def test_each_worker_is_asked_as_it_can_answer(
    backends: StandIns, worker: OldWorker, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = grpc.aio.server()
    inference_pb2_grpc.add_InferenceServicer_to_server(worker, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    monkeypatch.setattr(
        backends, "worker", lambda address: inference_pb2_grpc.InferenceStub(channel)
    )
    try:
        engine = ResponseEngine(resources(backends), outbox=recording_outbox())
        prepared = await prepare(engine, create(), SPRINT)
        assert prepared.response is not None
        generation = WorkerGeneration(engine.res, worker_silence_s=5.0)
        queue = ResponseEventQueue(prepared.response_id)

        async def save() -> None:
            return None

        for _ in range(2):  # the second time, an old worker is asked by Generate at once
            ended = await generation.run(
                prepared, Generation(prepared.route), ResponseEvents(prepared.response), queue, save
            )
            assert isinstance(ended, StepEnd) and ended.usage["output_tokens"] == 1
    finally:
        await channel.close()
        await server.stop(None)
    if isinstance(worker, NewWorker):
        assert worker.asked == ["GenerateBatched", "GenerateBatched"]
    else:
        assert worker.asked == ["Generate", "Generate"]  # UNIMPLEMENTED once, remembered
        assert generation.unbatched == {"w:1"}
