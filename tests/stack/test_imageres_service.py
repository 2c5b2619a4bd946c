"""The imageres service as a real process: Resolve, and ProxyGenerate in front of a fake worker
served from inside the test; and in process, the images it counts by result."""

from __future__ import annotations

import asyncio
import base64
import io
import signal
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import grpc
import pytest
from PIL import Image
from support.metric_samples import Delta
from support.procs import free_port, start_service

from turnpike import token_bytes
from turnpike.conversation.v1 import conversation_pb2
from turnpike.grpc_client import insecure_channel, wait_healthy
from turnpike.image_resolution import Limits
from turnpike.imageres.proxy import WorkerChannels
from turnpike.imageres.server import ImageResolverServicer
from turnpike.imageres.v1 import imageres_pb2, imageres_pb2_grpc
from turnpike.inference.v1 import inference_pb2, inference_pb2_grpc

SERVICE = "turnpike.imageres.v1.ImageResolver"


def png_data_url(width: int, height: int) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), "blue").save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def start_imageres() -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = start_service("imageres", {"TURNPIKE_IMAGERES_PORT": str(port)})
    address = f"127.0.0.1:{port}"
    if not asyncio.run(wait_healthy(address, timeout=20.0, service=SERVICE)):
        proc.kill()
        proc.wait(timeout=10)
        pytest.fail("imageres did not become healthy")
    return proc, address


@pytest.fixture(scope="module")
def imageres() -> Iterator[str]:
    proc, address = start_imageres()
    yield address
    proc.kill()
    proc.wait(timeout=10)


@pytest.fixture
async def stub(imageres: str) -> AsyncIterator[imageres_pb2_grpc.ImageResolverStub]:
    async with insecure_channel(imageres) as channel:
        yield imageres_pb2_grpc.ImageResolverStub(channel)


# The script a fake worker plays for a normal request.
SCRIPT = [
    inference_pb2.GenerateEvent(
        item_started=inference_pb2.ItemStarted(kind=inference_pb2.ItemStarted.MESSAGE)
    ),
    inference_pb2.GenerateEvent(delta=inference_pb2.Delta(text="Hel", tokens=1)),
    inference_pb2.GenerateEvent(delta=inference_pb2.Delta(text="lo", tokens=1)),
    inference_pb2.GenerateEvent(item_done=inference_pb2.ItemDone()),
    inference_pb2.GenerateEvent(
        finished=inference_pb2.Finished(
            finish_reason="stop",
            usage=inference_pb2.Usage(input_tokens=5, output_tokens=2),
            worker_id="fake-worker",
        )
    ),
]


@dataclass
class FakeWorker(inference_pb2_grpc.InferenceServicer):
    requests: list[inference_pb2.GenerateRequest] = field(default_factory=list)
    peers: list[str] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    never: asyncio.Event = field(default_factory=asyncio.Event)

    async def Generate(
        self, request: inference_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[inference_pb2.GenerateEvent]:
        self.requests.append(request)
        self.peers.append(context.peer())
        if request.request_id == "hang":
            yield SCRIPT[0]
            try:
                await self.never.wait()  # until the call is cancelled
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        elif request.request_id == "crash":
            yield SCRIPT[0]
            await context.abort(grpc.StatusCode.INTERNAL, "boom")
        else:
            for event in SCRIPT:
                yield event


@pytest.fixture
async def worker() -> AsyncIterator[tuple[FakeWorker, str]]:
    fake = FakeWorker()
    server = grpc.aio.server()
    inference_pb2_grpc.add_InferenceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield fake, f"127.0.0.1:{port}"
    await server.stop(None)


def generate_request(request_id: str = "resp_1", images: int = 1) -> inference_pb2.GenerateRequest:
    return inference_pb2.GenerateRequest(
        request_id=request_id,
        model="turnpike-sim",
        prompt=token_bytes.pack([1, 2, 3]),
        items=[
            conversation_pb2.Item(
                kind=conversation_pb2.Item.MESSAGE,
                role="user",
                text="what is this?",
                images=[
                    conversation_pb2.Image(url=png_data_url(64, 64), detail="auto")
                    for _ in range(images)
                ],
            )
        ],
    )


async def collect(call: grpc.aio.UnaryStreamCall) -> list[inference_pb2.GenerateEvent]:
    return [event async for event in call]


async def test_resolve(stub: imageres_pb2_grpc.ImageResolverStub) -> None:
    reply = await stub.Resolve(
        imageres_pb2.ResolveRequest(
            images=[
                conversation_pb2.Image(url=png_data_url(1024, 1024), detail="high"),
                conversation_pb2.Image(url=png_data_url(100, 50), detail="auto"),
                conversation_pb2.Image(file_id="file-123"),
                conversation_pb2.Image(url="https://example.com/a.png"),
                conversation_pb2.Image(url="data:image/png;base64,bm90IGFuIGltYWdl"),
            ]
        )
    )
    big, small, file_ref, remote, junk = reply.images
    assert (big.mime_type, big.width, big.height, big.detail, big.tokens) == (
        "image/png",
        1024,
        1024,
        "high",
        765,
    )
    assert big.sha256.startswith("sha256:") and len(big.sha256) == 7 + 64
    assert big.error == ""
    assert (small.detail, small.tokens, small.error) == ("low", 85, "")
    assert file_ref.error == "file 'file-123' not found"
    assert remote.error == "remote image URLs are not fetched"
    assert "not a recognised image" in junk.error
    assert reply.total_tokens == 765 + 85


async def test_resolve_nothing(stub: imageres_pb2_grpc.ImageResolverStub) -> None:
    reply = await stub.Resolve(imageres_pb2.ResolveRequest())
    assert list(reply.images) == []
    assert reply.total_tokens == 0


async def test_proxy_relays_events_in_order(
    stub: imageres_pb2_grpc.ImageResolverStub, worker: tuple[FakeWorker, str]
) -> None:
    fake, address = worker
    request = generate_request(images=2)
    events = await collect(
        stub.ProxyGenerate(
            imageres_pb2.ProxyGenerateRequest(worker_address=address, request=request)
        )
    )
    assert events == SCRIPT
    # Forwarded unchanged but for the images' token cost, which the proxy adds.
    [forwarded] = fake.requests
    assert forwarded.image_tokens > 0
    forwarded.image_tokens = 0
    assert forwarded == request


async def test_proxy_reuses_the_worker_connection(
    stub: imageres_pb2_grpc.ImageResolverStub, worker: tuple[FakeWorker, str]
) -> None:
    fake, address = worker
    for i in range(3):
        proxied = imageres_pb2.ProxyGenerateRequest(
            worker_address=address, request=generate_request(f"resp_{i}", images=0)
        )
        assert await collect(stub.ProxyGenerate(proxied)) == SCRIPT
    # Same client address and port each time: one connection, reused.
    assert len(fake.peers) == 3
    assert len(set(fake.peers)) == 1


async def test_proxy_to_dead_worker_relays_backend_unavailable(
    stub: imageres_pb2_grpc.ImageResolverStub,
) -> None:
    dead = f"127.0.0.1:{free_port()}"
    proxied = imageres_pb2.ProxyGenerateRequest(worker_address=dead, request=generate_request())
    # The proxy must answer on its own, not wait for the worker to appear.
    events = await asyncio.wait_for(collect(stub.ProxyGenerate(proxied)), timeout=15)
    assert len(events) == 1
    error = events[0].error
    assert events[0].WhichOneof("event") == "error"
    assert error.code == "backend_unavailable"
    assert error.retryable is True


async def test_worker_failure_mid_stream_is_not_retryable(
    stub: imageres_pb2_grpc.ImageResolverStub, worker: tuple[FakeWorker, str]
) -> None:
    _, address = worker
    events = await collect(
        stub.ProxyGenerate(
            imageres_pb2.ProxyGenerateRequest(
                worker_address=address, request=generate_request("crash")
            )
        )
    )
    assert events[0] == SCRIPT[0]
    assert [e.WhichOneof("event") for e in events] == ["item_started", "error"]
    assert events[1].error.retryable is False
    assert "boom" in events[1].error.message


async def test_bad_image_fails_before_the_worker(
    stub: imageres_pb2_grpc.ImageResolverStub, worker: tuple[FakeWorker, str]
) -> None:
    fake, address = worker
    request = generate_request()
    request.items[0].images.append(conversation_pb2.Image(file_id="file-missing"))
    events = await collect(
        stub.ProxyGenerate(
            imageres_pb2.ProxyGenerateRequest(worker_address=address, request=request)
        )
    )
    assert len(events) == 1
    assert events[0].error.code == "invalid_image"
    assert "file 'file-missing' not found" in events[0].error.message
    assert events[0].error.retryable is False
    assert fake.requests == []


async def test_caller_cancel_cancels_the_worker_call(
    stub: imageres_pb2_grpc.ImageResolverStub, worker: tuple[FakeWorker, str]
) -> None:
    fake, address = worker
    call = stub.ProxyGenerate(
        imageres_pb2.ProxyGenerateRequest(worker_address=address, request=generate_request("hang"))
    )
    first = await call.read()
    assert first == SCRIPT[0]
    call.cancel()
    await asyncio.wait_for(fake.cancelled.wait(), timeout=10)


@pytest.mark.parametrize(
    "bad",
    [
        imageres_pb2.ProxyGenerateRequest(request=generate_request()),
        imageres_pb2.ProxyGenerateRequest(worker_address="127.0.0.1:1"),
    ],
)
async def test_proxy_rejects_incomplete_requests(
    stub: imageres_pb2_grpc.ImageResolverStub, bad: imageres_pb2.ProxyGenerateRequest
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await collect(stub.ProxyGenerate(bad))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_sigterm_exits_cleanly() -> None:
    proc, address = await asyncio.to_thread(start_imageres)
    try:
        async with insecure_channel(address) as channel:
            reply = await imageres_pb2_grpc.ImageResolverStub(channel).Resolve(
                imageres_pb2.ResolveRequest(images=[conversation_pb2.Image(file_id="f")])
            )
            assert reply.images[0].error == "file 'f' not found"
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


async def test_images_are_counted_by_result() -> None:
    channels = WorkerChannels()
    servicer = ImageResolverServicer(Limits(max_image_pixels=512 * 512), channels)
    bmp = io.BytesIO()
    Image.new("RGB", (8, 8)).save(bmp, "BMP")
    expected = {
        "resolved": [png_data_url(64, 64), png_data_url(100, 50)],
        "invalid": ["data:image/png;base64,"],
        "unsupported_source": ["https://example.com/a.png", "ftp://example.com/a.png"],
        "too_large": [png_data_url(1024, 1024)],
        "unsupported_format": [
            "data:image/bmp;base64," + base64.b64encode(bmp.getvalue()).decode()
        ],
        "corrupt": ["data:image/png;base64,bm90IGFuIGltYWdl"],
    }
    counted = {
        result: Delta("turnpike_imageres_images_total", result=result) for result in expected
    }
    images = [conversation_pb2.Image(url=url) for urls in expected.values() for url in urls]
    try:
        reply = await servicer.Resolve(imageres_pb2.ResolveRequest(images=images), None)
    finally:
        await channels.close()
    assert reply.total_tokens == 85 + 85
    assert {result: delta.change for result, delta in counted.items()} == {
        result: len(urls) for result, urls in expected.items()
    }


class FakeChannel:
    """Stands in for a grpc.aio channel: enough for a stub to be built on it, and a
    record of its closing."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.closed = False

    def unary_unary(self, *args, **kwargs):
        return None

    unary_stream = stream_unary = stream_stream = unary_unary

    async def close(self, grace: float | None = None) -> None:
        self.closed = True


async def test_worker_channels_stay_bounded_and_close_what_they_evict(monkeypatch) -> None:
    """Callers naming ever new (valid) worker addresses must not grow the channels
    without bound: the least recently used is evicted and closed."""
    from turnpike.imageres import proxy

    opened: dict[str, FakeChannel] = {}

    def open_channel(address: str) -> FakeChannel:
        opened[address] = FakeChannel(address)
        return opened[address]

    monkeypatch.setattr(proxy, "insecure_channel", open_channel)
    channels = WorkerChannels()
    try:
        first = channels.stub("worker-0:50061")
        for i in range(1, 200):
            channels.stub(f"worker-{i}:50061")
            assert channels.stub("worker-0:50061") is first  # in use: kept, not reopened
        await asyncio.sleep(0)  # evicted channels close in the background
        still_open = {address for address, channel in opened.items() if not channel.closed}
        newest = {f"worker-{i}:50061" for i in range(200 - 63, 200)}
        assert still_open == {"worker-0:50061", *newest}
        assert len(opened) == 200
    finally:
        await channels.close()
    assert all(channel.closed for channel in opened.values())
