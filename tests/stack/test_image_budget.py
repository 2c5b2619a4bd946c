"""Input images bounded per request (issue 19): the pixels a request's images declare in
their headers are summed and refused past TURNPIKE_IMAGERES_MAX_REQUEST_PIXELS before any
is decoded, and a process decodes at most one largest image's pixels at once."""

from __future__ import annotations

import asyncio
import base64
import functools
import io
import json
import threading
import time
import zlib
from pathlib import Path

import grpc
import httpx
import pytest
from PIL import Image, ImageFile
from support.gateway_process import start_gateway, stop
from support.openresponses import validate_error_body
from support.procs import free_port, start_service
from websockets.sync.client import connect as ws_connect

from turnpike.config import ConfigError, ImageresSettings
from turnpike.conversation.v1 import conversation_pb2
from turnpike.gateway.pipeline.stages.resolve_images import image_tokens
from turnpike.gateway.protocol.errors import ApiError
from turnpike.grpc_client import insecure_channel, wait_healthy
from turnpike.image_budget import (
    DecodeAllowance,
    ImagesTooLarge,
    check_budget,
    probe_images,
    resolve_images,
)
from turnpike.image_resolution import (
    CORRUPT,
    TOO_LARGE,
    UNSUPPORTED_SOURCE,
    Limits,
    Probe,
    Resolution,
    resolve_image,
)
from turnpike.imageres.proxy import WorkerChannels
from turnpike.imageres.server import ImageResolverServicer
from turnpike.imageres.v1 import imageres_pb2, imageres_pb2_grpc
from turnpike.inference.v1 import inference_pb2
from turnpike.inference.v1.inference_pb2_grpc import InferenceStub

BIG = 8192  # the per-image pixel limit's side (TURNPIKE_IMAGERES_MAX_IMAGE_PIXELS)
MIB = 1024 * 1024
# 1024x1024 at high detail: 4 tiles (85 + 4 * 170).
TOKENS_1024 = 765
SMALL_BUDGET = 3_000_000  # two 1024x1024 images (2,097,152 pixels) fit, three do not
BUDGET_VARIABLE = "TURNPIKE_IMAGERES_MAX_REQUEST_PIXELS"
IMAGERES_SERVICE = "turnpike.imageres.v1.ImageResolver"


@functools.cache
def png(width: int, height: int, variant: int = 0) -> bytes:
    """A flat PNG, different bytes per ``variant``; an 8192x8192 one is about 215 KB and
    decodes to 256 MiB."""
    image = Image.new("RGB", (width, height), (200, 30, 40))
    image.putpixel((variant % width, 0), (variant % 256, 0, 0))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


THREE = [png(1024, 1024, n) for n in range(3)]


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def images_input(*images: bytes, detail: str = "auto") -> list[dict]:
    content: list[dict] = [{"type": "input_text", "text": "What is in these pictures?"}]
    content += [
        {"type": "input_image", "image_url": data_url(data), "detail": detail} for data in images
    ]
    return [{"role": "user", "content": content}]


def post(base: str, key: str, body: dict, path: str = "/v1/responses", **headers: str):
    return httpx.post(
        f"{base}{path}",
        json=body,
        headers={"Authorization": f"Bearer {key}", **headers},
        timeout=120,
    )


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def expect_images_too_large(reply: httpx.Response, holds: int, limit: int) -> None:
    assert reply.status_code == 400, reply.text[:500]
    body = reply.json()
    validate_error_body(body)
    error = body["error"]
    assert (error["code"], error["param"], error["type"]) == (
        "images_too_large",
        "input",
        "invalid_request_error",
    )
    assert f"{holds:,}" in error["message"] and f"{limit:,}" in error["message"], error


def ws_turn(sock, frame: dict) -> dict:
    sock.send(json.dumps({"type": "response.create", **frame}))
    while True:
        event = json.loads(sock.recv(timeout=120))
        if event["type"] in ("error", "response.completed", "response.failed"):
            return event


def image(data: bytes, detail: str = "auto") -> conversation_pb2.Image:
    return conversation_pb2.Image(url=data_url(data), detail=detail)


def encode(width: int, height: int, fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "red").save(buffer, fmt)
    return buffer.getvalue()


def scrambled_pixels(data: bytes) -> bytes:
    """The PNG with its compressed pixels replaced by garbage of the same length, every
    chunk's CRC made right again: its header reads well, only decoding finds it broken."""
    out, pos = bytearray(data[:8]), 8
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IDAT":
            body = bytes(byte ^ 0x5A for byte in body)
        out += length.to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")
        pos += 12 + length
    return bytes(out)


@pytest.fixture
def decodes(monkeypatch) -> list[str]:
    """Every full decode Pillow is asked for, by format."""
    seen: list[str] = []
    load = ImageFile.ImageFile.load

    def counted(self):
        seen.append(self.format)
        return load(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counted)
    return seen


# Probing and the budget, without a gateway ---------------------------------------


def test_probing_reads_each_size_from_the_header_alone(decodes) -> None:
    for fmt, mime in (("PNG", "png"), ("JPEG", "jpeg"), ("GIF", "gif"), ("WEBP", "webp")):
        [probe] = probe_images([image(encode(2048, 1024, fmt))], Limits())
        assert isinstance(probe, Probe), probe
        assert (probe.mime_type, probe.width, probe.height) == (f"image/{mime}", 2048, 1024)
        assert probe.detail == "high" and probe.pixels == 2048 * 1024
    assert decodes == []


def test_probing_reports_what_the_header_shows_per_image() -> None:
    too_many = Limits(max_image_pixels=100 * 100)
    probed = probe_images(
        [
            image(encode(64, 64, "PNG")),
            conversation_pb2.Image(file_id="file-x"),
            image(b"not an image"),
            image(encode(101, 100, "PNG")),
        ],
        too_many,
    )
    assert isinstance(probed[0], Probe)
    assert [(r.error_kind, r.tokens) for r in probed[1:] if isinstance(r, Resolution)] == [
        (UNSUPPORTED_SOURCE, 0),
        (CORRUPT, 0),
        (TOO_LARGE, 0),
    ]


def test_the_budget_adds_up_every_image_and_names_the_limit() -> None:
    probed = probe_images([image(png(1024, 1024, n)) for n in range(3)], Limits())
    check_budget(probed, Limits(max_request_pixels=3 * 1024 * 1024))  # at the limit: fine
    with pytest.raises(ImagesTooLarge) as refused:
        check_budget(probed, Limits(max_request_pixels=3 * 1024 * 1024 - 1))
    assert refused.value.pixels == 3 * 1024 * 1024 and refused.value.images == 3
    assert "3,145,728 pixels" in str(refused.value) and "3,145,727 pixels" in str(refused.value)
    # An image already in error is not counted: it will not be decoded.
    check_budget([*probed, Resolution(error="x", error_kind=CORRUPT)], Limits(3 * 1024 * 1024))


async def test_a_request_over_the_budget_is_a_400_before_any_decoding(decodes) -> None:
    """Every item's images count, the history's as well as the new ones."""
    history = conversation_pb2.Item(images=[image(png(1024, 1024, 0))])
    new = conversation_pb2.Item(images=[image(png(1024, 1024, 1)), image(png(1024, 1024, 2))])
    limits = Limits(max_request_pixels=SMALL_BUDGET)
    with pytest.raises(ApiError) as refused:
        await image_tokens([history, new], limits)
    error = refused.value
    assert (error.status, error.code, error.param) == (400, "images_too_large", "input")
    assert "images of this request hold 3,145,728 pixels in all (3 images)" in error.message
    assert "limit of 3,000,000 pixels per request" in error.message
    assert decodes == []
    assert await image_tokens([new], limits) == 2 * TOKENS_1024
    assert decodes == ["PNG", "PNG"]


async def test_within_the_budget_tokens_are_as_resolve_image_prices_them() -> None:
    images = [image(encode(300, 200, "PNG")), image(encode(2048, 4096, "JPEG"), "high")]
    images.append(image(encode(1536, 1024, "WEBP"), "low"))
    limits = Limits()
    expected = sum(resolve_image(i.url, i.file_id, i.detail, limits).tokens for i in images)
    assert expected == 85 + 1105 + 85
    assert await image_tokens([conversation_pb2.Item(images=images)], limits) == expected
    resolved = await resolve_images(images, limits)
    assert resolved == [resolve_image(i.url, i.file_id, i.detail, limits) for i in images]


async def test_an_image_broken_past_its_header_is_still_found_by_decoding() -> None:
    """Probing is not a substitute for decoding: a PNG whose header and checksums are
    right but whose pixels do not decompress is refused as corrupt, as it always was."""
    broken = scrambled_pixels(png(64, 64))
    [probe] = probe_images([image(broken)], Limits())
    assert isinstance(probe, Probe)
    with Image.open(io.BytesIO(broken)) as opened:
        opened.verify()  # checksums alone would pass it
    [resolved] = await resolve_images([image(broken)], Limits())
    assert resolved.error_kind == CORRUPT and "corrupt" in resolved.error
    with pytest.raises(ApiError) as refused:
        await image_tokens(
            [conversation_pb2.Item(images=[image(png(8, 8)), image(broken)])], Limits()
        )
    assert refused.value.code == "invalid_image"
    assert refused.value.message.startswith("Invalid input image 1: image data is corrupt")


async def test_errors_the_headers_show_come_before_the_budget() -> None:
    items = [conversation_pb2.Item(images=[image(png(1024, 1024)), image(b"not an image")])]
    with pytest.raises(ApiError) as refused:
        await image_tokens(items, Limits(max_request_pixels=1))
    assert refused.value.code == "invalid_image" and "image 1" in refused.value.message


# The allowance: pixels decoded at once ---------------------------------------------


class Held:
    """Work for the allowance's threads that runs until the test lets it end."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.ends: dict[str, threading.Event] = {}

    def work(self, name: str) -> str:
        self.started.append(name)
        self.ends.setdefault(name, threading.Event()).wait(30)
        return name

    def end(self, name: str) -> None:
        self.ends.setdefault(name, threading.Event()).set()


async def until(condition, what: str) -> None:
    for _ in range(3000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never: {what}")


async def test_the_allowance_lends_pixels_first_come_first_served() -> None:
    allowance, held = DecodeAllowance(100), Held()
    tasks = {}
    for name, pixels in (("a", 60), ("b", 30), ("c", 30), ("d", 10)):
        tasks[name] = asyncio.create_task(allowance.run(pixels, held.work, name))
        await asyncio.sleep(0)
    await until(lambda: sorted(held.started) == ["a", "b"], "a and b started")
    # c waits for 30 with 10 free, and d, which would fit, waits behind it.
    assert allowance.free == 10 and not tasks["c"].done() and not tasks["d"].done()
    held.end("a")
    assert await tasks["a"] == "a"
    await until(lambda: sorted(held.started) == ["a", "b", "c", "d"], "c and d started")
    assert allowance.free == 100 - 30 - 30 - 10
    for name in "bcd":
        held.end(name)
    assert [await tasks[name] for name in "bcd"] == ["b", "c", "d"]
    assert allowance.free == 100


async def test_an_image_larger_than_the_allowance_decodes_alone() -> None:
    allowance, held = DecodeAllowance(100), Held()
    small = asyncio.create_task(allowance.run(10, held.work, "small"))
    await until(lambda: held.started == ["small"], "small started")
    huge = asyncio.create_task(allowance.run(1000, held.work, "huge"))
    await asyncio.sleep(0.05)
    assert held.started == ["small"]
    held.end("small")
    await until(lambda: held.started == ["small", "huge"], "huge started")
    assert allowance.free == 0
    held.end("huge")
    assert (await small, await huge) == ("small", "huge")
    assert allowance.free == 100


async def test_a_cancelled_caller_gives_back_nothing_it_did_not_get() -> None:
    """A waiting caller that leaves lets the next one in; one whose decode is running
    keeps its pixels lent until the thread ends (the thread cannot be stopped)."""
    allowance, held = DecodeAllowance(100), Held()
    running = asyncio.create_task(allowance.run(80, held.work, "running"))
    await until(lambda: held.started == ["running"], "running started")
    waiting = asyncio.create_task(allowance.run(50, held.work, "waiting"))
    behind = asyncio.create_task(allowance.run(20, held.work, "behind"))
    await asyncio.sleep(0.05)
    waiting.cancel()
    await until(lambda: "behind" in held.started, "behind started once waiting left")
    assert allowance.free == 0
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert allowance.free == 0  # its thread still decodes
    held.end("running")
    await until(lambda: allowance.free == 80, "running's pixels given back")
    held.end("behind")
    assert await behind == "behind"
    assert waiting.cancelled() and "waiting" not in held.started
    assert allowance.free == 100


# The imageres service, in process ----------------------------------------------------


class Aborted(Exception):
    pass


class Context:
    async def abort(self, code: grpc.StatusCode, details: str):
        raise Aborted(code, details)

    def time_remaining(self) -> float:
        return 30.0


class NoWorkers(WorkerChannels):
    def stub(self, address: str) -> InferenceStub:
        raise AssertionError("the worker was called")


async def test_imageres_refuses_a_request_over_the_budget_before_decoding(decodes) -> None:
    servicer = ImageResolverServicer(Limits(max_request_pixels=SMALL_BUDGET), NoWorkers())
    images = [image(png(1024, 1024, n)) for n in range(3)]
    with pytest.raises(Aborted) as aborted:
        await servicer.Resolve(imageres_pb2.ResolveRequest(images=images), Context())
    code, details = aborted.value.args
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert "3,145,728 pixels" in details and "3,000,000 pixels per request" in details
    generate = inference_pb2.GenerateRequest(items=[conversation_pb2.Item(images=images)])
    proxied = imageres_pb2.ProxyGenerateRequest(worker_address="127.0.0.1:1", request=generate)
    events = [event async for event in servicer.ProxyGenerate(proxied, Context())]
    assert [event.error.code for event in events] == ["images_too_large"]
    assert events[0].error.retryable is False and "3,145,728" in events[0].error.message
    assert decodes == []
    reply = await servicer.Resolve(imageres_pb2.ResolveRequest(images=images[:2]), Context())
    assert reply.total_tokens == 2 * TOKENS_1024 and decodes == ["PNG", "PNG"]


async def test_the_imageres_process_reads_its_budget() -> None:
    port = free_port()
    env = {"TURNPIKE_IMAGERES_PORT": str(port)}
    proc = start_service("imageres", {**env, BUDGET_VARIABLE: str(SMALL_BUDGET)})
    try:
        address = f"127.0.0.1:{port}"
        assert await wait_healthy(address, timeout=20.0, service=IMAGERES_SERVICE)
        async with insecure_channel(address) as channel:
            stub = imageres_pb2_grpc.ImageResolverStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await stub.Resolve(imageres_pb2.ResolveRequest(images=map(image, THREE)))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "3,000,000 pixels per request" in (refused.value.details() or "")
            reply = await stub.Resolve(imageres_pb2.ResolveRequest(images=map(image, THREE[:2])))
            assert reply.total_tokens == 2 * TOKENS_1024
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_budget_below_one_pixel_is_a_configuration_error(monkeypatch) -> None:
    monkeypatch.setenv(BUDGET_VARIABLE, "0")
    with pytest.raises(ConfigError, match=f"{BUDGET_VARIABLE}='0': must be at least 1"):
        ImageresSettings()
    monkeypatch.setenv(BUDGET_VARIABLE, "12345")
    assert ImageresSettings().max_request_pixels == 12345


# The hostile probe, against gateways of their own ------------------------------


def six_largest() -> list[bytes]:
    return [png(BIG, BIG, n) for n in range(6)]


def test_six_largest_images_are_refused_before_any_is_decoded(stack, tmp_path) -> None:
    """The probe that took a gateway from 113 to 1,522 MiB: six 8192x8192 PNGs, each
    within the per-image limit, 6 x 67 million pixels in all. By default a request may
    hold 67,108,864 pixels (one such image), so it is refused from the headers alone.
    (The input bound is raised so that one body can carry all six.)"""
    proc, base = start_gateway(
        stack, log=tmp_path / "gateway.log", TURNPIKE_MAX_INPUT_CHARS=str(8 * MIB)
    )
    body = {"input": images_input(*six_largest())}
    try:
        before = peak_rss_mib(proc.pid)
        started = time.monotonic()
        reply = post(base, stack.api_key, body)
        took = time.monotonic() - started
        grown = peak_rss_mib(proc.pid) - before
        print(f"\nsix 8192x8192 PNGs, default budget: {reply.status_code} in {took:.2f} s, "
              f"peak RSS {before:.0f} -> {before + grown:.0f} MiB")  # fmt: skip
        expect_images_too_large(reply, 6 * BIG * BIG, BIG * BIG)
        assert grown < 64, f"the gateway's peak memory grew {grown:.0f} MiB"
        # The gateway serves on.
        assert post(base, stack.api_key, {"input": "hi"}).status_code == 200
    finally:
        stop(proc)


def test_images_within_a_large_budget_are_decoded_one_largest_at_a_time(stack, tmp_path) -> None:
    """The probe's shape where the budget allows it: a conversation of six 8192x8192 PNGs
    (three a turn), whose second turn resolves all six again. Every turn is served and
    priced, and the process holds about one decoded image (256 MiB) at once at most."""
    proc, base = start_gateway(
        stack,
        log=tmp_path / "gateway.log",
        **{BUDGET_VARIABLE: str(6 * BIG * BIG)},
    )
    images = six_largest()
    try:
        text_only = post(base, stack.api_key, {"input": images_input()}).json()
        before = peak_rss_mib(proc.pid)
        started = time.monotonic()
        first = post(base, stack.api_key, {"input": images_input(*images[:3])})
        assert first.status_code == 200, first.text[:500]
        follow_up = {"input": images_input(*images[3:]), "previous_response_id": first.json()["id"]}
        second = post(base, stack.api_key, follow_up)
        took = time.monotonic() - started
        grown = peak_rss_mib(proc.pid) - before
        print(f"\n3 + 6 8192x8192 PNGs resolved, budget of six: {second.status_code} in "
              f"{took:.2f} s, peak RSS {before:.0f} -> {before + grown:.0f} MiB")  # fmt: skip
        assert second.status_code == 200, second.text[:500]
        # 8192x8192 at auto (high) detail: 2048x2048, then 768x768: 4 tiles.
        expected = text_only["usage"]["input_tokens"] + 3 * TOKENS_1024
        assert first.json()["usage"]["input_tokens"] == expected
        assert second.json()["usage"]["input_tokens"] > 6 * TOKENS_1024
        assert grown < 2 * 256, f"the gateway's peak memory grew {grown:.0f} MiB"
    finally:
        stop(proc)


# The budget over HTTP and WebSocket, on a gateway with a small one ---------------


@pytest.fixture(scope="module")
def budgeted(stack, tmp_path_factory):
    log = tmp_path_factory.mktemp("budgeted") / "gateway.log"
    proc, base = start_gateway(stack, log=log, **{BUDGET_VARIABLE: str(SMALL_BUDGET)})
    yield base
    stop(proc)
    assert "Traceback" not in log.read_text()


def test_over_the_budget_is_a_400_naming_it_over_http(stack, budgeted) -> None:
    body = {"input": images_input(*THREE)}
    expect_images_too_large(post(budgeted, stack.api_key, body), 3 * 1024 * 1024, SMALL_BUDGET)
    streamed = post(budgeted, stack.api_key, {**body, "stream": True})
    expect_images_too_large(streamed, 3 * 1024 * 1024, SMALL_BUDGET)
    counted = post(budgeted, stack.api_key, body, "/v1/responses/input_tokens")
    expect_images_too_large(counted, 3 * 1024 * 1024, SMALL_BUDGET)


def test_over_the_budget_is_an_error_event_over_websocket(stack, budgeted) -> None:
    url = budgeted.replace("http://", "ws://") + "/v1/responses"
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    with ws_connect(url, additional_headers=headers, max_size=None, open_timeout=10) as sock:
        event = ws_turn(sock, {"input": images_input(*THREE)})
        assert event["type"] == "error" and event["status"] == 400, event
        error = event["error"]
        assert (error["code"], error["param"]) == ("images_too_large", "input")
        assert f"{3 * 1024 * 1024:,}" in error["message"]
        assert f"{SMALL_BUDGET:,}" in error["message"]
        # The socket stays usable, and images within the budget are priced as ever.
        text_only = ws_turn(sock, {"input": images_input()})
        two = ws_turn(sock, {"input": images_input(*THREE[:2], detail="high")})
        assert two["type"] == "response.completed", two
        assert two["response"]["usage"]["input_tokens"] == (
            text_only["response"]["usage"]["input_tokens"] + 2 * TOKENS_1024
        )


def test_within_the_budget_images_are_priced_as_before(stack, budgeted) -> None:
    text_only = post(budgeted, stack.api_key, {"input": images_input()}).json()
    base = text_only["usage"]["input_tokens"]
    high = post(budgeted, stack.api_key, {"input": images_input(*THREE[:2], detail="high")})
    low = post(budgeted, stack.api_key, {"input": images_input(*THREE[:2], detail="low")})
    assert high.status_code == 200 and low.status_code == 200, (high.text, low.text)
    assert high.json()["usage"]["input_tokens"] == base + 2 * TOKENS_1024
    assert low.json()["usage"]["input_tokens"] == base + 2 * 85


def test_history_images_count_where_they_are_resolved_again(stack, budgeted) -> None:
    """Over HTTP a follow-up resolves its history's images again, so they count against
    its budget; a WebSocket turn continuing from the connection resolves only its own."""
    first = post(budgeted, stack.api_key, {"input": images_input(*THREE[:2])}).json()
    follow_up = {"input": images_input(THREE[2]), "previous_response_id": first["id"]}
    expect_images_too_large(post(budgeted, stack.api_key, follow_up), 3 * 1024 * 1024, SMALL_BUDGET)
    url = budgeted.replace("http://", "ws://") + "/v1/responses"
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    with ws_connect(url, additional_headers=headers, max_size=None, open_timeout=10) as sock:
        turn = ws_turn(sock, {"input": images_input(*THREE[:2])})
        assert turn["type"] == "response.completed", turn
        turn = ws_turn(
            sock, {"input": images_input(THREE[2]), "previous_response_id": turn["response"]["id"]}
        )
        assert turn["type"] == "response.completed", turn


def test_the_legacy_image_hop_holds_the_same_budget(stack, budgeted) -> None:
    """On the legacy pipeline the imageres service resolves the images (the stack's, with
    the default budget): it refuses two largest images before decoding either, and the
    response fails with the same code, as the legacy path reports every image error."""
    body = {"input": images_input(*six_largest()[:2])}
    reply = post(budgeted, stack.api_key, body, **{"X-Turnpike-Pipeline": "legacy"})
    assert reply.status_code == 200, reply.text[:500]
    response = reply.json()
    assert response["status"] == "failed", response
    assert response["error"]["code"] == "images_too_large"
    assert f"{2 * BIG * BIG:,}" in response["error"]["message"]
    assert f"{BIG * BIG:,}" in response["error"]["message"]
