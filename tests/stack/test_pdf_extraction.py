"""PDF text extraction off the event loop, bounded (issue 19): the PDF workers
(turnpike.gateway.upstream.pdf_pool, turnpike.gateway.upstream.pdf_worker) and ``read_pdfs`` (turnpike.gateway.upstream.input_files).

A probe's PDFs (support.pdf_bombs) stalled every client of the gateway for seconds to
minutes and flooded its log; the compliance suite's PDF without a cross-reference table
was refused. Here each bomb ends within its bound as a 400 naming the file (or is read,
cheaply), the gateway answers others meanwhile, the log stays quiet, the pool recovers
from a killed worker, and every path that takes input reads its PDFs.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import signal
import threading
from typing import Any

import httpx
import pytest
from support import pdf_bombs
from support.gateway_process import start_gateway, stop
from support.pdf import COMPLIANCE_FIXTURE, COMPLIANCE_FIXTURE_TEXT, minimal_pdf
from websockets.sync.client import connect as ws_connect

from turnpike.config import ConfigError, PdfSettings
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.input_files import PENDING
from turnpike.gateway.protocol.request import parse_create
from turnpike.gateway.upstream.pdf_pool import PdfFailure, PdfPool, PdfPoolBusy
from turnpike.gateway.upstream.pdf_text import MAX_PDFS_PER_REQUEST, read_pdfs

PARAM = "input[0].content[0].file_data"


def pdf_part(pdf: bytes, filename: str = "f.pdf") -> dict[str, Any]:
    data = base64.b64encode(pdf).decode()
    return {
        "type": "input_file",
        "filename": filename,
        "file_data": f"data:application/pdf;base64,{data}",
    }


def user(*parts: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [*parts, {"type": "input_text", "text": "Summarise."}]}]


async def read(pool: PdfPool, *pdfs: bytes) -> list[dict[str, Any]]:
    request = parse_create({"input": user(*map(pdf_part, pdfs))}, default_model="m")
    await read_pdfs(request.input_items, pool)
    return request.input_items[0]["content"]


async def refusal(pool: PdfPool, *pdfs: bytes) -> ApiError:
    with pytest.raises(ApiError) as err:
        await read(pool, *pdfs)
    return err.value


@pytest.fixture
async def pools():
    """``pools(**settings)``: a pool with those settings, closed after the test."""
    made: list[PdfPool] = []

    def make(**settings: Any) -> PdfPool:
        made.append(PdfPool(PdfSettings(**settings)))
        return made[-1]

    yield make
    for pool in made:
        await pool.close()


# The library and the compliance fixture -------------------------------------------


async def test_the_compliance_fixture_without_a_cross_reference_table_is_read(pools) -> None:
    [part, _] = await read(pools(), COMPLIANCE_FIXTURE)
    assert part == {"type": "input_file", "filename": "f.pdf", "text": COMPLIANCE_FIXTURE_TEXT}


async def test_a_workers_start_is_not_charged_to_the_pdfs_deadline(
    pools, tmp_path, monkeypatch
) -> None:
    """A cold worker's interpreter start counts against no PDF: under load (make test
    with two xdist workers and a compiler running) a start outlasted a 0.5 s deadline,
    and the valid PDF after a bomb was refused as too complex. Here every worker starts
    a second late (a sitecustomize that sleeps), and the deadline is half that."""
    (tmp_path / "sitecustomize.py").write_text("import time\ntime.sleep(1.0)\n")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    [part, _] = await read(pools(timeout_s=0.5), COMPLIANCE_FIXTURE)
    assert part["text"] == COMPLIANCE_FIXTURE_TEXT


async def test_pages_are_bounded(pools) -> None:
    err = await refusal(pools(max_pages=3), minimal_pdf("a", "b", "c", "d"))
    assert (err.status, err.code, err.param) == (400, "file_too_large", PARAM)
    assert "4 pages, over 3" in err.message


# Each bomb within its bound --------------------------------------------------------

SLOW = pdf_bombs.many_pages(operators_bytes=3_000_000)  # 6 s of CPU here, alone: 6x the bound


@pytest.mark.parametrize(
    ("pdf", "settings", "bound"),
    [
        (pdf_bombs.flate_bomb(), {"memory_mb": 128}, "128 MiB of memory"),
        (pdf_bombs.xobject_fanout(), {}, "256 MiB of memory"),
        (SLOW, {"cpu_s": 1, "timeout_s": 60}, "1 seconds of CPU"),
        (SLOW, {"cpu_s": 60, "timeout_s": 0.5}, "0.5 seconds"),
    ],
    ids=["flate-bomb-memory", "xobject-fanout-memory", "many-pages-cpu", "many-pages-deadline"],
)
async def test_a_bomb_is_a_400_naming_the_bound_it_hit(pools, caplog, pdf, settings, bound) -> None:
    pool = pools(**settings)
    err = await refusal(pool, pdf)
    assert (err.status, err.code, err.param) == (400, "file_too_complex", PARAM)
    assert bound in err.message
    # The worker's exit was seen by asyncio (none reaped it unseen: "exit code 255").
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == []
    # The worker that hit the bound is gone; the next PDF gets a new one.
    [part, _] = await read(pool, COMPLIANCE_FIXTURE)
    assert part["text"] == COMPLIANCE_FIXTURE_TEXT


async def test_the_bombs_are_read_or_refused_within_the_default_bounds(pools) -> None:
    pool = pools()
    for name, build in pdf_bombs.BOMBS.items():
        try:
            [part, _] = await read(pool, build())
        except ApiError as err:
            assert (err.status, err.code, err.param) == (400, "file_too_complex", PARAM), name
        else:
            assert len(part["text"]) < 100, name  # what they show: a line at most


async def test_reading_a_pdf_never_logs_what_the_library_warns(pools, caplog, capfd) -> None:
    """A lenient reader warns once per duplicated key: 11,000 lines for this file."""
    caplog.set_level(logging.DEBUG)
    [part, _] = await read(pools(), pdf_bombs.warning_flood())
    assert part["text"] == "warning flood"
    assert caplog.records == []
    assert capfd.readouterr() == ("", "")  # nor the worker's own stdout or stderr


# Off the loop, bounded in concurrency -------------------------------------------------


async def test_the_event_loop_runs_while_a_pdf_is_read(pools) -> None:
    pool = pools(cpu_s=60, timeout_s=60)
    slow = asyncio.create_task(pool.text(SLOW))
    ticks = 0
    while ticks < 20:  # 0.2 s of other work, answered on time
        await asyncio.wait_for(asyncio.sleep(0.01), 1)
        ticks += 1
    assert not slow.done()
    slow.cancel()
    with pytest.raises(asyncio.CancelledError):
        await slow
    assert pool.workers == 0  # cancelled mid-PDF: its worker is killed, not reused


async def test_past_the_workers_and_the_queue_a_pdf_is_refused_at_once(pools) -> None:
    pool = pools(workers=1, queue=1, cpu_s=60, timeout_s=60)
    reading = asyncio.create_task(pool.text(SLOW))
    waiting = asyncio.create_task(pool.text(SLOW))
    await asyncio.sleep(0.2)
    with pytest.raises(PdfPoolBusy):
        await pool.text(COMPLIANCE_FIXTURE)
    err = await refusal(pool, COMPLIANCE_FIXTURE)
    assert (err.status, err.code, err.param) == (503, "server_overloaded", PARAM)
    assert err.headers == {"retry-after": "1"}
    for task in (reading, waiting):
        task.cancel()
    await asyncio.gather(reading, waiting, return_exceptions=True)
    assert await pool.text(COMPLIANCE_FIXTURE) == COMPLIANCE_FIXTURE_TEXT


async def test_the_pool_recovers_after_its_worker_is_killed(pools) -> None:
    pool = pools(cpu_s=60, timeout_s=60)
    assert await pool.text(COMPLIANCE_FIXTURE) == COMPLIANCE_FIXTURE_TEXT
    [idle] = pool._idle
    os.kill(idle.process.pid, signal.SIGKILL)  # killed while idle (the OOM killer, say)
    await idle.process.wait()
    assert await pool.text(COMPLIANCE_FIXTURE) == COMPLIANCE_FIXTURE_TEXT
    # Killed mid-PDF: that PDF fails, the next one is read.
    slow = asyncio.create_task(pool.text(SLOW))
    for _ in range(100):  # until its worker has started
        if pool.workers:
            break
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    os.kill(next(iter(pool._all)).process.pid, signal.SIGKILL)
    with pytest.raises(PdfFailure) as failure:
        await slow
    assert failure.value.reason == "crashed"
    assert await pool.text(COMPLIANCE_FIXTURE) == COMPLIANCE_FIXTURE_TEXT


# Bounds per request ------------------------------------------------------------------


async def test_a_request_holds_a_bounded_number_of_pdfs(pools) -> None:
    pool = pools()
    err = await refusal(pool, *[COMPLIANCE_FIXTURE] * (MAX_PDFS_PER_REQUEST + 1))
    expected = f"input[0].content[{MAX_PDFS_PER_REQUEST}].file_data"
    assert (err.status, err.code, err.param) == (400, "too_many_files", expected)
    assert pool.workers == 0  # refused before any was read


async def test_a_requests_pdfs_share_one_budget_of_characters(pools) -> None:
    pool = pools(max_chars=60)
    parts = await read(pool, COMPLIANCE_FIXTURE)  # 40 characters
    assert parts[0]["text"] == COMPLIANCE_FIXTURE_TEXT
    err = await refusal(pool, COMPLIANCE_FIXTURE, COMPLIANCE_FIXTURE)
    assert (err.code, err.param) == ("file_too_large", "input[0].content[1].file_data")
    assert "the text of the request's PDFs is over 60 characters" in err.message


async def test_a_pdf_is_not_read_while_parsing_and_not_a_pdf_never_reaches_a_worker(
    pools,
) -> None:
    request = parse_create({"input": user(pdf_part(COMPLIANCE_FIXTURE))}, default_model="m")
    assert PENDING in request.input_items[0]["content"][0]
    with pytest.raises(ApiError) as err:
        parse_create({"input": user(pdf_part(b"GIF89a not a pdf"))}, default_model="m")
    assert (err.value.code, err.value.param) == ("invalid_file", PARAM)


@pytest.mark.parametrize(
    ("variable", "value"),
    [("TURNPIKE_PDF_WORKERS", "0"), ("TURNPIKE_PDF_TIMEOUT_S", "0"), ("TURNPIKE_PDF_QUEUE", "-1")],
)
def test_settings_out_of_range_are_refused_at_start(monkeypatch, variable, value) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=variable):
        PdfSettings()


# Against a real gateway process ---------------------------------------------------------

GATEWAY_TIMEOUT_S = 2  # past it the gateway's worker is killed
# Several times the deadline in any reader on an idle machine (SLOW alone took 2.9 s once,
# under the old 3 s deadline), and under the create body's character bound as base64.
SLOWER = pdf_bombs.many_pages(operators_bytes=2_000_000)


@pytest.fixture(scope="module")
def gateway(stack, tmp_path_factory):
    log = tmp_path_factory.mktemp("pdf-gateway") / "gateway.log"
    proc, base = start_gateway(
        stack, log=log, TURNPIKE_PDF_TIMEOUT_S=str(GATEWAY_TIMEOUT_S), TURNPIKE_PDF_CPU_S="60"
    )
    yield base, log
    stop(proc)


def headers(stack) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.api_key}"}


def create_over(transport: str, base: str, stack, body: dict[str, Any]) -> dict[str, Any]:
    """The error (or the response) a create gets over ``transport``."""
    if transport == "http":
        reply = httpx.post(f"{base}/v1/responses", json=body, headers=headers(stack), timeout=120)
        return reply.json()
    url = base.replace("http://", "ws://") + "/v1/responses"
    with ws_connect(url, additional_headers=headers(stack), open_timeout=10) as sock:
        sock.send(json.dumps({"type": "response.create", **body}))
        while True:
            event = json.loads(sock.recv(timeout=120))
            if event["type"] in ("error", "response.completed", "response.failed"):
                return event


@pytest.mark.parametrize("transport", ["http", "websocket"])
def test_the_gateway_answers_others_while_a_bomb_is_read(gateway, stack, transport) -> None:
    base, log = gateway
    body = {"model": "turnpike-sim", "input": user(pdf_part(SLOWER))}
    result: dict[str, Any] = {}
    bomb = threading.Thread(
        target=lambda: result.update(create_over(transport, base, stack, body)), daemon=True
    )
    bomb.start()
    answered = 0
    for _ in range(5):
        threading.Event().wait(0.1)
        reply = httpx.get(f"{base}/healthz", timeout=2)
        assert reply.status_code == 200, log.read_text()[-3000:]
        answered += 1
    assert bomb.is_alive(), "the bomb was read before the gateway was asked anything"
    bomb.join(60)
    assert answered == 5
    assert "error" in result, (result, log.read_text()[-3000:])
    assert result["error"]["code"] == "file_too_complex", result
    assert result["error"]["param"] == PARAM
    assert f"{GATEWAY_TIMEOUT_S} seconds" in result["error"]["message"]


def test_a_pdf_that_warns_on_every_key_leaves_the_log_quiet(gateway, stack) -> None:
    base, log = gateway
    before = log.read_bytes().count(b"\n")
    body = {"model": "turnpike-sim", "input": user(pdf_part(pdf_bombs.warning_flood()))}
    response = create_over("http", base, stack, body)
    assert response["status"] == "completed", response
    assert log.read_bytes().count(b"\n") - before < 10


# Every path that takes input items reads its PDFs ------------------------------------


def api(stack, method: str, path: str, body: Any = None) -> dict[str, Any]:
    reply = httpx.request(
        method, f"{stack.base_url}{path}", json=body, headers=headers(stack), timeout=60
    )
    assert reply.status_code == 200, reply.text[:500]
    return reply.json()


def fixture_part() -> dict[str, Any]:
    return pdf_part(COMPLIANCE_FIXTURE, "fixture.pdf")


def test_input_tokens_count_the_pdfs_text(stack) -> None:
    def count(*parts: dict[str, Any]) -> int:
        body = {"model": "turnpike-sim", "input": user(*parts)}
        return api(stack, "POST", "/responses/input_tokens", body)["input_tokens"]

    blank = {"type": "input_text", "text": "[file: fixture.pdf]"}
    assert count(fixture_part()) > count(blank) + 5


def test_compact_keeps_the_pdfs_text(stack) -> None:
    """The compaction item seals the file's text: sent back, it renders as the file did."""
    body = {"model": "turnpike-sim", "input": user(fixture_part())}
    compacted = api(stack, "POST", "/responses/compact", body)
    assert [item["type"] for item in compacted["output"]] == ["compaction"]
    again = {"model": "turnpike-sim", "input": compacted["output"]}
    tokens = api(stack, "POST", "/responses/input_tokens", again)["input_tokens"]
    assert tokens == compacted["usage"]["input_tokens"]
    assert tokens == api(stack, "POST", "/responses/input_tokens", body)["input_tokens"]


def test_conversation_items_are_stored_with_the_pdfs_text(stack) -> None:
    conversation = api(stack, "POST", "/conversations", {"items": user(fixture_part())})
    path = f"/conversations/{conversation['id']}/items"
    api(stack, "POST", path, {"items": user(fixture_part())})
    items = api(stack, "GET", f"{path}?order=asc")["data"]
    texts = [p.get("text") for item in items for p in item["content"] if p["type"] == "input_file"]
    assert texts == [COMPLIANCE_FIXTURE_TEXT, COMPLIANCE_FIXTURE_TEXT]
    reply = httpx.post(
        f"{stack.base_url}{path}",
        json={"items": user(pdf_part(pdf_bombs.xobject_fanout()))},
        headers=headers(stack),
        timeout=60,
    )
    assert reply.status_code == 400
    assert (reply.json()["error"]["code"], reply.json()["error"]["param"]) == (
        "file_too_complex",
        "items[0].content[0].file_data",
    )
