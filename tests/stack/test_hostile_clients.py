"""Hostile and broken clients against real processes (issue 14): each gets a clear error
or close, within a bound, and leaves the gateway serving others.

The session stack answers the body-shaped cases; a gateway of its own (``guarded``) has
short bounds (a 1 s request-head timeout, 1 s of write stall, 2,000 input characters)
and a captured log."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.gateway_process import start_gateway, stop
from support.openresponses import validate_error_body
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.stack

HEAD_TIMEOUT_S = 1.0
WRITE_STALL_S = 1.0
MAX_INPUT_CHARS = 2000
# How long a test waits for the server to close a slow connection: far past the bound
# (a loaded machine), far short of "forever".
CLOSE_WITHIN_S = 15.0


def post(base: str, key: str, raw: bytes, timeout: float = 60) -> httpx.Response:
    return httpx.post(
        f"{base}/responses",
        content=raw,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        timeout=timeout,
    )


def expect_error(reply: httpx.Response, status: int, code: str, param: str | None) -> dict:
    assert reply.status_code == status, reply.text[:500]
    body = reply.json()
    validate_error_body(body)
    assert (body["error"]["code"], body["error"]["param"]) == (code, param), body
    return body["error"]


def ws(url: str, key: str):
    return ws_connect(
        url, additional_headers={"Authorization": f"Bearer {key}"}, max_size=None, open_timeout=10
    )


def next_terminal(sock) -> dict:
    while True:
        event = json.loads(sock.recv(timeout=60))
        if event["type"] in ("error", "response.completed", "response.failed"):
            return event


# Bodies ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "code", "param"),
    [
        (b'{"input": ' + b"[" * 100 + b"]" * 100 + b"}", "json_too_deep", "input"),
        (b'{"input": ' + b"[" * 10_000 + b"]" * 10_000 + b"}", "json_too_deep", None),
        (b'{"input": "\\ud800"}', "invalid_unicode", "input"),
        (
            b'{"input": "hi", "previous_response_id": "\\ud800"}',
            "invalid_unicode",
            "previous_response_id",
        ),
        (json.dumps({"input": "hi", "model": "m" * 900_000}).encode(), "invalid_value", "model"),
        (json.dumps({"input": "hi", "include": "x"}).encode(), "invalid_type", "include"),
        (
            json.dumps({"input": "hi", "stream_options": 1}).encode(),
            "invalid_type",
            "stream_options",
        ),
    ],
    ids=["nested-100", "nested-10000", "surrogate-input", "surrogate-previous", "model-900k",
         "include", "stream-options"],
)  # fmt: skip
def test_a_hostile_body_is_a_400_naming_its_parameter(stack, raw, code, param) -> None:
    expect_error(post(stack.base_url, stack.api_key, raw), 400, code, param)


def test_hostile_frames_get_error_events_and_the_socket_stays_usable(stack) -> None:
    frames = [
        '{"type": "response.create", "input": ' + "[" * 100 + "]" * 100 + "}",
        '{"type": "response.create", "input": "hi", "previous_response_id": "\\ud800"}',
        json.dumps({"type": "response.create", "input": "hi", "model": "m" * 900_000}),
        json.dumps({"type": "response.create", "input": "hi", "stream_options": "yes"}),
    ]
    params = ["input", "previous_response_id", "model", "stream_options"]
    with ws(stack.ws_url, stack.api_key) as sock:
        for frame, param in zip(frames, params, strict=True):
            sock.send(frame)
            event = next_terminal(sock)
            assert event["type"] == "error" and event["status"] == 400, event
            assert event["error"]["param"] == param
        sock.send(json.dumps({"type": "response.create", "input": "still there?"}))
        assert next_terminal(sock)["type"] == "response.completed"


def test_error_messages_do_not_echo_a_huge_or_invalid_id(stack) -> None:
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    for response_id in ("r" * 6000, "%ED%A0%80", "%00%ff"):
        reply = httpx.get(f"{stack.base_url}/responses/{response_id}", headers=headers, timeout=30)
        error = expect_error(reply, 404, "response_not_found", "response_id")
        assert len(error["message"]) < 300


@pytest.mark.parametrize("text", ["a" * 1_000_000, "\u00e9" * 100_000, " " * 1_000_000])
def test_a_long_run_of_one_character_is_answered_and_breaks_nothing(stack, text) -> None:
    """It took the tokenizer ~30 s, then the native encoder overflowed its stack (in the
    worker, whose answer quoted it) and the request hung; now it renders in pieces."""
    raw = json.dumps({"input": text}, ensure_ascii=False).encode()
    reply = post(stack.base_url, stack.api_key, raw, 120)
    assert reply.status_code == 200, reply.text[:500]
    assert reply.json()["status"] == "completed"
    assert reply.json()["usage"]["input_tokens"] > len(text) // 130


def test_a_run_over_the_context_window_is_a_400(stack) -> None:
    raw = json.dumps({"input": "\u00e9" * 450_000}, ensure_ascii=False).encode()
    reply = post(stack.base_url, stack.api_key, raw, 120)
    expect_error(reply, 400, "context_length_exceeded", "input")


# A gateway of its own: short bounds, a captured log ----------------------------


@pytest.fixture(scope="module")
def guarded(stack, tmp_path_factory):
    log = tmp_path_factory.mktemp("guarded") / "gateway.log"
    proc, base = start_gateway(
        stack,
        log=log,
        TURNPIKE_HEADER_TIMEOUT_S=str(HEAD_TIMEOUT_S),
        TURNPIKE_WRITE_STALL_TIMEOUT_S=str(WRITE_STALL_S),
        TURNPIKE_MAX_INPUT_CHARS=str(MAX_INPUT_CHARS),
    )
    yield base, log
    stop(proc)


def address(base: str) -> tuple[str, int]:
    host, port = base.removeprefix("http://").split(":")
    return host, int(port)


def trickle(base: str, head: bytes, interval: float = 0.2) -> tuple[bytes, float]:
    """Send ``head`` a byte at a time, never finishing it; what the server answered and
    how long it took to close the connection."""
    started = time.monotonic()
    received = b""
    with socket.create_connection(address(base), timeout=CLOSE_WITHIN_S) as sock:
        sock.settimeout(interval)
        for byte in head * 1000:
            try:
                sock.send(bytes([byte]))
            except OSError:
                break  # closed by the server
            try:
                chunk = sock.recv(4096)
            except TimeoutError:
                chunk = None
            if chunk == b"":
                break
            if chunk:
                received += chunk
            assert time.monotonic() - started < CLOSE_WITHIN_S, "the connection stayed open"
    return received, time.monotonic() - started


@pytest.mark.parametrize(
    "head",
    [
        b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Slow: ",
        b"GET /v1/responses HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-Slow: ",
    ],
    ids=["http", "websocket-upgrade"],
)
def test_a_slow_request_head_is_closed_with_408(guarded, head) -> None:
    base, _ = guarded
    received, took = trickle(base, head)
    assert received.startswith(b"HTTP/1.1 408"), received
    assert took >= HEAD_TIMEOUT_S
    assert json.loads(received.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"


def test_a_client_still_sending_when_its_head_times_out_reads_the_408(guarded) -> None:
    """The server answers 408 while the client is still sending. Closing the socket at
    once would make the kernel answer those bytes with a reset, which can discard the
    408 before the client reads it; the server must drain the client's bytes until it
    has finished with the connection."""
    base, _ = guarded
    head = b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nX-Slow: "
    with socket.create_connection(address(base), timeout=CLOSE_WITHIN_S) as sock:
        sock.sendall(head)
        sending_until = time.monotonic() + HEAD_TIMEOUT_S + 1.0
        while time.monotonic() < sending_until:
            sock.sendall(b"x" * 64)  # the 408 arrives meanwhile, unread
            time.sleep(0.01)
        received = b""
        while chunk := sock.recv(4096):
            received += chunk
    assert received.startswith(b"HTTP/1.1 408"), received


def test_a_silent_connection_is_closed(guarded) -> None:
    base, _ = guarded
    started = time.monotonic()
    with socket.create_connection(address(base), timeout=CLOSE_WITHIN_S) as sock:
        assert sock.recv(4096).startswith(b"HTTP/1.1 408")
        assert sock.recv(4096) == b""
    assert time.monotonic() - started < CLOSE_WITHIN_S


def test_the_head_bound_never_cuts_a_response_or_an_open_socket(guarded, stack) -> None:
    base, _ = guarded
    key = stack.api_key
    with httpx.Client(timeout=60, headers={"Authorization": f"Bearer {key}"}) as client:
        types = []
        body = {"model": "turnpike-sim-65", "input": "tell me a long story", "stream": True}
        with client.stream("POST", f"{base}/v1/responses", json=body) as reply:
            for line in reply.iter_lines():
                if line.startswith("data: {"):
                    types.append(json.loads(line[6:])["type"])
        assert types[-1] == "response.completed"
        time.sleep(HEAD_TIMEOUT_S * 1.5)  # an idle keep-alive connection, then a request
        assert client.get(f"{base}/v1/models").status_code == 200
    with ws(base.replace("http://", "ws://") + "/v1/responses", key) as sock:
        time.sleep(HEAD_TIMEOUT_S * 1.5)  # the upgrade is done: no head to wait for
        sock.send(json.dumps({"type": "response.create", "input": "hi"}))
        assert next_terminal(sock)["type"] == "response.completed"


def test_input_over_the_character_bound_is_a_400_before_any_backend(guarded, stack) -> None:
    base, _ = guarded
    text = "word " * (MAX_INPUT_CHARS // 4)
    reply = post(base + "/v1", stack.api_key, json.dumps({"input": text}).encode())
    expect_error(reply, 400, "input_too_large", "input")
    with ws(base.replace("http://", "ws://") + "/v1/responses", stack.api_key) as sock:
        sock.send(json.dumps({"type": "response.create", "input": text}))
        event = next_terminal(sock)
        assert (event["status"], event["error"]["param"]) == (400, "input")
        sock.send(json.dumps({"type": "response.create", "input": "short"}))
        assert next_terminal(sock)["type"] == "response.completed"


def test_a_refused_upgrade_logs_no_error(guarded) -> None:
    base, log = guarded
    url = base.replace("http://", "ws://") + "/v1/responses"
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
        with pytest.raises(InvalidStatus) as refused:
            ws_connect(url, additional_headers=headers, open_timeout=10)
        assert refused.value.response.status_code == 401
        validate_error_body(json.loads(refused.value.response.body))
    time.sleep(0.5)  # let the process flush its log
    assert "ERROR" not in Path(log).read_text()


@pytest.fixture(scope="module")
def stalling(stack, tmp_path_factory):
    """A gateway that aborts a connection after 1 s of write stall (and no other bound)."""
    log = tmp_path_factory.mktemp("stalling") / "gateway.log"
    proc, base = start_gateway(stack, log=log, TURNPIKE_WRITE_STALL_TIMEOUT_S=str(WRITE_STALL_S))
    yield base, log
    stop(proc)


# Spaces render to few tokens (128 to one), so a response object echoing them is large
# to send and cheap to make: each of created, in_progress and completed carries them.
BULKY_INSTRUCTIONS = " " * 900_000


def test_a_client_that_never_reads_its_socket_is_cut_off(stalling, stack) -> None:
    """Six responses of 2.7 MB each fill every buffer (an SSE stream's one response fits
    the kernel's; tests/unit/gateway/test_gateway_http_protocol.py covers it on the protocol)."""
    base, log = stalling
    url = base.replace("http://", "ws://") + "/v1/responses"
    with socket.socket() as raw:
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        raw.connect(address(base))
        with ws_connect(
            url,
            sock=raw,
            additional_headers={"Authorization": f"Bearer {stack.api_key}"},
            max_size=None,
            open_timeout=10,
            max_queue=1,  # the client library reads no further ahead than one frame
        ) as sock:
            for lane in range(6):
                frame = {
                    "type": "response.create",
                    "input": "hi",
                    "instructions": BULKY_INSTRUCTIONS,
                    "generate": False,
                    "stream_id": f"lane-{lane}",
                }
                sock.send(json.dumps(frame))
            time.sleep(5 * WRITE_STALL_S)
            started = time.monotonic()
            with pytest.raises(ConnectionClosed) as closed:
                while time.monotonic() - started < CLOSE_WITHIN_S:
                    sock.recv(timeout=CLOSE_WITHIN_S)
            assert closed.value.rcvd is None  # aborted: no close frame for a deaf client
    assert "aborted a connection that read nothing" in Path(log).read_text()
    # The gateway still serves everyone else.
    with ws(url, stack.api_key) as sock:
        sock.send(json.dumps({"type": "response.create", "input": "hi"}))
        assert next_terminal(sock)["type"] == "response.completed"


def gateway_rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def test_a_thousand_idle_websockets_leave_the_gateway_serving(stack, tmp_path) -> None:
    """1,000 sockets opened and left idle on one gateway process: each costs little
    memory, and a new client is still answered at once."""
    from websockets.asyncio.client import connect as ws_async_connect

    proc, base = start_gateway(stack, log=tmp_path / "gateway.log")
    url = base.replace("http://", "ws://") + "/v1/responses"
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    idle = []
    try:
        before = gateway_rss_kb(proc.pid)
        for _ in range(10):  # in batches, as clients would arrive
            idle += await asyncio.gather(
                *(ws_async_connect(url, additional_headers=headers, open_timeout=60)
                  for _ in range(100))
            )  # fmt: skip
        grown_mb = (gateway_rss_kb(proc.pid) - before) / 1024
        # About 100 KB a socket at most (uvicorn's protocol, wsproto, a session).
        assert grown_mb < 100, f"{grown_mb:.0f} MB for 1,000 idle sockets"
        async with ws_async_connect(url, additional_headers=headers) as fresh:
            await fresh.send(json.dumps({"type": "response.create", "input": "hi"}))
            while (event := json.loads(await asyncio.wait_for(fresh.recv(), 60)))["type"] not in (
                "response.completed",
                "error",
            ):
                pass
            assert event["type"] == "response.completed"
        # The idle ones are still open, and usable.
        await idle[0].send(json.dumps({"type": "response.create", "input": "still here"}))
        while json.loads(await asyncio.wait_for(idle[0].recv(), 60))["type"] != (
            "response.completed"
        ):
            pass
    finally:
        await asyncio.gather(*(sock.close() for sock in idle), return_exceptions=True)
        stop(proc)
    assert "ERROR" not in (tmp_path / "gateway.log").read_text()


def test_a_body_at_the_size_limit_is_served_and_one_byte_more_is_413(stack) -> None:
    limit = stack.max_body_bytes
    envelope = json.dumps({"input": ""}).encode()
    at_limit = json.dumps({"input": " " * (limit - len(envelope))}).encode()
    assert len(at_limit) == limit
    reply = post(stack.base_url, stack.api_key, at_limit, 120)
    assert reply.status_code == 200, reply.text[:300]
    over = json.dumps({"input": " " * (limit - len(envelope) + 1)}).encode()
    expect_error(post(stack.base_url, stack.api_key, over), 413, "request_too_large", None)


def test_a_frame_at_the_size_limit_is_served_and_one_byte_more_is_an_error(stack) -> None:
    limit = stack.max_frame_bytes
    envelope = json.dumps({"type": "response.create", "input": ""})
    with ws(stack.ws_url, stack.api_key) as sock:
        for extra, expected in ((0, "response.completed"), (1, "error")):
            text = " " * (limit - len(envelope) + extra)
            sock.send(json.dumps({"type": "response.create", "input": text}))
            event = next_terminal(sock)
            assert event["type"] == expected, str(event)[:300]
        assert event["status"] == 413


def test_more_lanes_than_allowed_get_an_error_and_the_socket_stays_usable(stack) -> None:
    """The maximum of named lanes (32 by default), each with a response, then one more."""
    lanes = 32
    with ws(stack.ws_url, stack.api_key) as sock:
        for lane in range(lanes + 1):
            frame = {"type": "response.create", "input": "hi", "stream_id": f"lane-{lane}"}
            sock.send(json.dumps(frame))
        terminals: dict[str, dict] = {}
        while len(terminals) < lanes + 1:
            event = next_terminal(sock)
            terminals[event.get("stream_id", "?")] = event
        refused = terminals[f"lane-{lanes}"]
        assert refused["type"] == "error" and refused["status"] == 400
        assert refused["error"]["code"] == "websocket_stream_limit_reached"
        assert refused["error"]["param"] == "stream_id"
        assert all(terminals[f"lane-{n}"]["type"] == "response.completed" for n in range(lanes))
        sock.send(json.dumps({"type": "response.create", "input": "again", "stream_id": "lane-0"}))
        assert next_terminal(sock)["type"] == "response.completed"


# Clients that leave ------------------------------------------------------------

LONG_ASK = {"model": "turnpike-sim-65", "input": "tell me about rivers in 2000 words"}


def usage_of(stack, key: str) -> dict:
    reply = httpx.get(
        f"{stack.base_url}/usage", headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def settled(stack, key: str, response_id: str) -> dict:
    """The stored response once it has stopped, and billing has its usage."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        reply = httpx.get(
            f"{stack.base_url}/responses/{response_id}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30,
        )
        stored = reply.json()
        if (
            stored["status"] not in ("queued", "in_progress")
            and not usage_of(stack, key)["pending_events"]
        ):
            return stored
        time.sleep(0.2)
    pytest.fail(f"response {response_id} still running a minute after its client left")


def sse_create(stack, key: str, body: dict):
    """A streamed create, open: the caller reads as much of it as it wants, then leaves."""
    return httpx.stream(
        "POST",
        f"{stack.base_url}/responses",
        json={**body, "stream": True},
        headers={"Authorization": f"Bearer {key}"},
        timeout=30,
    )


def billed_once(stack, key: str, before: dict) -> dict:
    """The tenant's usage once one more response is billed and nothing is pending."""
    deadline = time.monotonic() + 60
    while (now := usage_of(stack, key))["responses"] == before["responses"] or now[
        "pending_events"
    ]:
        assert time.monotonic() < deadline, "the response was never billed"
        time.sleep(0.2)
    assert now["responses"] - before["responses"] == 1
    return now


def test_an_sse_client_that_leaves_mid_stream_stops_generation_and_is_billed_for_it(stack):
    """~2,000 tokens at 65 a second would take half a minute: the client leaves after its
    first deltas, the worker stops, and billing charges the tokens generated."""
    key = stack.api_keys["bob"]
    before = usage_of(stack, key)
    with sse_create(stack, key, LONG_ASK) as reply:
        deltas, response_id = 0, None
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                if event["type"] == "response.created":
                    response_id = event["response"]["id"]
                deltas += event["type"] == "response.output_text.delta"
                if deltas == 3:
                    break
    assert response_id is not None, "no response.created event"
    stored = settled(stack, key, response_id)
    assert stored["status"] == "cancelled"
    generated = stored["usage"]["output_tokens"]
    assert 0 < generated < 1000
    after = usage_of(stack, key)
    assert after["output_tokens"] - before["output_tokens"] == generated
    assert after["responses"] - before["responses"] == 1


def test_a_websocket_client_that_leaves_mid_stream_stops_generation(stack):
    key = stack.api_keys["bob"]
    before = usage_of(stack, key)
    with ws(stack.ws_url, key) as sock:
        sock.send(json.dumps({"type": "response.create", **LONG_ASK}))
        deltas = 0
        while deltas < 3:
            event = json.loads(sock.recv(timeout=30))
            if event["type"] == "response.created":
                response_id = event["response"]["id"]
            deltas += event["type"] == "response.output_text.delta"
    stored = settled(stack, key, response_id)
    assert stored["status"] == "cancelled"
    generated = stored["usage"]["output_tokens"]
    assert 0 < generated < 1000
    assert usage_of(stack, key)["output_tokens"] - before["output_tokens"] == generated


def test_a_websocket_client_that_leaves_before_the_first_token_stops_generation(stack):
    """Gone while safety and rendering run: the response's first event finds the socket
    closed, and the worker stops before it has generated much."""
    key = stack.api_keys["bob"]
    before = usage_of(stack, key)
    with ws(stack.ws_url, key) as sock:
        sock.send(json.dumps({"type": "response.create", **LONG_ASK}))
    now = billed_once(stack, key, before)
    assert now["output_tokens"] - before["output_tokens"] < 1000  # of about 2,000 asked


def test_an_sse_client_that_leaves_before_the_first_token_stops_generation(stack):
    """Gone while safety and rendering run (the response's headers read, no event yet):
    the stream's first write finds the client gone, the worker stops, and what was
    generated, if anything, is billed once."""
    key = stack.api_keys["bob"]
    before = usage_of(stack, key)
    with sse_create(stack, key, LONG_ASK) as reply:
        assert reply.status_code == 200
    now = billed_once(stack, key, before)
    assert now["output_tokens"] - before["output_tokens"] < 1000  # of about 2,000 asked


def http_responses_ended(stack, tenant: str, outcome: str) -> float:
    """How many non-streamed responses of ``tenant`` the gateway ended as ``outcome``."""
    page = httpx.get(f"http://{stack.metrics['gateway']}/metrics", timeout=10).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
        if sample.name == "turnpike_gateway_responses_total"
        and sample.labels.get("transport") == "http"
        and sample.labels.get("tenant") == tenant
        and sample.labels.get("outcome") == outcome
    )


def test_a_client_that_leaves_a_non_streamed_response_stops_generation(stack):
    """A plain JSON create sends its client nothing until the response is done, so only
    the connection tells that the client left (here, giving up after 2 s of the half
    minute the answer takes). The response ends as a stream's does when its client
    leaves: cancelled, the worker stopped, what was generated billed once."""
    key = stack.api_keys["bob"]
    before = usage_of(stack, key)
    cancelled = http_responses_ended(stack, "bob", "cancelled")
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{stack.base_url}/responses",
            json=LONG_ASK,
            headers={"Authorization": f"Bearer {key}"},
            timeout=httpx.Timeout(30, read=2),
        )
    now = billed_once(stack, key, before)
    assert now["output_tokens"] - before["output_tokens"] < 1000  # of about 2,000 asked
    deadline = time.monotonic() + 30
    while http_responses_ended(stack, "bob", "cancelled") == cancelled:
        assert time.monotonic() < deadline, "the response did not end cancelled"
        time.sleep(0.2)
    assert http_responses_ended(stack, "bob", "cancelled") - cancelled == 1


SHORT_ASK = {"model": "turnpike-sim", "input": "Say hello.", "text": {"verbosity": "high"}}


def _billed_once_as_stored(stack, key: str, before: dict, response_id: str) -> None:
    stored = settled(stack, key, response_id)
    assert stored["status"] in ("completed", "cancelled"), stored["status"]
    after = usage_of(stack, key)
    assert after["responses"] - before["responses"] == 1
    assert after["output_tokens"] - before["output_tokens"] == stored["usage"]["output_tokens"]
    assert stored["usage"]["output_tokens"] > 0


def test_an_sse_client_that_leaves_at_the_last_token_is_billed_what_was_generated(stack):
    """Gone once the text is done, before the terminal event: whether the response ends
    completed or cancelled, billing charges exactly what it stored, once."""
    key = stack.api_keys["bob"]
    before = usage_of(stack, key)
    with sse_create(stack, key, SHORT_ASK) as reply:
        response_id = None
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                event = json.loads(line[6:])
                if event["type"] == "response.created":
                    response_id = event["response"]["id"]
                if event["type"] == "response.output_text.done":
                    break
    assert response_id is not None
    _billed_once_as_stored(stack, key, before, response_id)


def test_a_websocket_client_that_leaves_at_the_last_token_is_billed_what_was_generated(stack):
    key = stack.api_keys["bob"]
    before = usage_of(stack, key)
    with ws(stack.ws_url, key) as sock:
        sock.send(json.dumps({"type": "response.create", **SHORT_ASK}))
        while True:
            event = json.loads(sock.recv(timeout=30))
            if event["type"] == "response.created":
                response_id = event["response"]["id"]
            if event["type"] == "response.output_text.done":
                break
    _billed_once_as_stored(stack, key, before, response_id)
