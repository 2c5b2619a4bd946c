"""A WebSocket fuzzer (hypothesis) against a real gateway process over the real backends,
on the real endpoint ``/v1/responses``: frames of random JSON, wrong field types and
unknown event types; huge, binary and invalid UTF-8 frames, nested JSON; interleaved
``stream_id`` lanes; ``previous_response_id`` of another tenant, of a failed or incomplete
response, and of the future. The property: each bad request gets an error event (of
the API's shape, on its lane), the socket is usable afterwards (a valid request then
completes), and the gateway logs no server error.

``FUZZ_EXAMPLES`` examples per test (8 by default); ``make fuzz`` runs more."""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.fuzz_gateway import MAX_BYTES, FuzzGateway, start_fuzz_gateway, stop_fuzz_gateway
from support.gateway_process import stop
from support.openresponses import validate_ws_event
from support.procs import free_port, start_service
from support.wire import TERMINAL
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect
from websockets.sync.connection import Connection

pytestmark = pytest.mark.stack

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "8"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
    database=None,
)
# A response that ran: 16 output tokens often end it incomplete (max_output_tokens).
RAN = {"response.completed", "response.incomplete"}
VALID = {"type": "response.create", "model": "turnpike-sim-4000", "max_output_tokens": 16}
CREATE_FIELDS = [
    "model",
    "input",
    "instructions",
    "previous_response_id",
    "conversation",
    "tools",
    "tool_choice",
    "metadata",
    "text",
    "reasoning",
    "temperature",
    "top_p",
    "max_output_tokens",
    "max_tool_calls",
    "parallel_tool_calls",
    "truncation",
    "store",
    "background",
    "generate",
    "stream_id",
    "user",
    "prompt_cache_key",
    "service_tier",
    "context_management",
    "include",
    "stream_options",
]


@pytest.fixture(scope="module")
def gateway(stack, tmp_path_factory) -> Iterator[FuzzGateway]:
    gateway = start_fuzz_gateway(stack, tmp_path_factory.mktemp("fuzz-ws") / "gateway.log")
    yield gateway
    stop_fuzz_gateway(gateway)


@pytest.fixture
def no_server_errors(gateway: FuzzGateway) -> Iterator[None]:
    """The test's share of the gateway's log holds no ERROR and no traceback, and the
    process is alive."""
    start = gateway.log_size()
    yield
    assert gateway.alive(), "the gateway exited"
    assert gateway.server_errors(start) == []


def connect(gateway: FuzzGateway, tenant: str = "alice") -> ClientConnection:
    return ws_connect(
        gateway.ws_url, additional_headers=gateway.headers(tenant), max_size=None, open_timeout=10
    )


def recv(sock: Connection) -> dict[str, Any]:
    event = json.loads(sock.recv(timeout=30))
    validate_ws_event(event)
    return event


def until_terminal(sock: Connection) -> list[dict[str, Any]]:
    events = [recv(sock)]
    while events[-1]["type"] not in TERMINAL:
        events.append(recv(sock))
    return events


def create(gateway: FuzzGateway, tenant: str = "alice", **fields: Any) -> dict[str, Any]:
    """A response made over a socket of its own: its terminal event."""
    with connect(gateway, tenant) as sock:
        sock.send(json.dumps({**VALID, "input": "make me", **fields}))
        return until_terminal(sock)[-1]


def assert_usable(sock: Connection) -> None:
    sock.send(json.dumps({**VALID, "input": "still there?"}))
    assert until_terminal(sock)[-1]["type"] in RAN


def assert_api_error(event: dict[str, Any], fields: set[str] | None = None) -> None:
    """An error event of a 4xx, whose ``param`` (when set) names a field of the frame."""
    assert event["type"] == "error", event
    assert 400 <= event["status"] < 500, event
    param = event["error"]["param"]
    if param and fields is not None:
        assert re.split(r"[.\[]", param, maxsplit=1)[0] in fields, event


# Random JSON of a few levels; the deep kind has tests of its own (test_nested_json).
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
# Lone surrogates included: the gateway refuses them with a 400 naming where they are.
TEXT = st.text(max_size=40)


@FUZZ
@given(frame=JSON)
def test_random_json_frames(gateway: FuzzGateway, no_server_errors: None, frame: Any) -> None:
    with connect(gateway) as sock:
        sock.send(json.dumps(frame))
        if not (
            isinstance(frame, dict) and frame.get("type") in ("response.create", "response.steer")
        ):
            event = recv(sock)
            assert_api_error(event, {"type"})
        assert_usable(sock)


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(CREATE_FIELDS), JSON, min_size=1, max_size=4))
def test_create_with_wrong_types(
    gateway: FuzzGateway, no_server_errors: None, fields: dict[str, Any]
) -> None:
    """A create of random values: it fails with an error naming one of its fields, or
    it is a valid request and its response ends."""
    with connect(gateway) as sock:
        sock.send(json.dumps({"type": "response.create", **fields}))
        last = until_terminal(sock)[-1]
        if last["type"] == "error":
            assert_api_error(last, set(fields) | {"input", "model"})
        if last["type"] == "error" or last.get("stream_id") is None:
            assert_usable(sock)


@FUZZ
@given(kind=TEXT.filter(lambda kind: kind not in ("response.create", "response.steer")))
def test_unknown_event_types(gateway: FuzzGateway, no_server_errors: None, kind: str) -> None:
    with connect(gateway) as sock:
        sock.send(json.dumps({"type": kind, "input": "hi"}))
        event = recv(sock)
        assert_api_error(event, {"type"})
        assert event["error"]["code"] == "unknown_event_type"
        assert_usable(sock)


@FUZZ
@given(data=st.binary(max_size=200))
def test_binary_frames(gateway: FuzzGateway, no_server_errors: None, data: bytes) -> None:
    """Binary frames (invalid UTF-8 among them) are read as JSON text would be."""
    with connect(gateway) as sock:
        sock.send(data)
        try:
            body = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            body = None
        if not (
            isinstance(body, dict) and body.get("type") in ("response.create", "response.steer")
        ):
            assert_api_error(recv(sock), {"type"})
        assert_usable(sock)


@FUZZ
@given(data=st.binary(min_size=1, max_size=50).filter(lambda b: not _is_utf8(b)))
def test_text_frames_of_invalid_utf8_close_1007(gateway: FuzzGateway, data: bytes) -> None:
    """A text frame that is not UTF-8 breaks the WebSocket protocol itself: the server
    closes with 1007 (invalid frame payload data), and a new connection works."""
    start = gateway.log_size()
    with connect(gateway) as sock:
        sock.send(data, text=True)
        with pytest.raises(ConnectionClosed) as closed:
            sock.recv(timeout=10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1007
    with connect(gateway) as sock:
        assert_usable(sock)
    assert gateway.server_errors(start) == []
    assert gateway.alive()


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


@pytest.mark.parametrize("over", [1, 4096])
@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_huge_frames(gateway: FuzzGateway, no_server_errors: None, over: int, binary: bool) -> None:
    frame = json.dumps({**VALID, "input": "x" * (MAX_BYTES + over)})
    with connect(gateway) as sock:
        sock.send(frame.encode() if binary else frame)
        event = recv(sock)
        assert_api_error(event)
        assert event["status"] == 413 and event["error"]["code"] == "request_too_large"
        assert_usable(sock)


@pytest.mark.parametrize("depth", [2, 16, 64, 65, 10_000])
def test_nested_json(gateway: FuzzGateway, no_server_errors: None, depth: int) -> None:
    nested = "[" * depth + "]" * depth
    with connect(gateway) as sock:
        sock.send(f'{{"type": "response.create", "model": "turnpike-sim-4000", "input": {nested}}}')
        assert_api_error(recv(sock), {"input"})
        sock.send(f'{{"type": "response.create", "metadata": {{"a": {nested}}}}}')
        assert_api_error(recv(sock), {"metadata"})
        assert_usable(sock)


LANE = st.sampled_from(["a", "b", "c", None])
STEP = st.tuples(LANE, st.booleans())  # (lane, a valid request or not)


@FUZZ
@given(steps=st.lists(STEP, min_size=1, max_size=8))
def test_interleaved_lanes(
    gateway: FuzzGateway, no_server_errors: None, steps: list[tuple[str | None, bool]]
) -> None:
    """Creates sent at once on a few lanes, valid or not: each event carries its lane; an
    invalid create is answered at once, a valid one on a busy lane waits its turn (FIFO
    lanes), and each started response ends on its own lane."""
    expected: dict[str | None, list[str]] = {}  # lane -> the outcomes
    with connect(gateway) as sock:
        for lane, valid in steps:
            body: dict[str, Any] = {**VALID, "input": "lane"} if valid else {**VALID, "input": 7}
            if lane is not None:
                body["stream_id"] = lane
            sock.send(json.dumps(body))
            expected.setdefault(lane, []).append("completed" if valid else "invalid_type")
        seen: dict[str | None, list[str]] = {}
        while sum(map(len, seen.values())) < sum(map(len, expected.values())):
            event = recv(sock)
            lane = event.get("stream_id")
            if event["type"] == "error":
                assert_api_error(event, {"input", "stream_id"})
                seen.setdefault(lane, []).append(event["error"]["code"])
            elif event["type"] in TERMINAL:
                assert event["type"] in RAN, event
                seen.setdefault(lane, []).append("completed")
        # Outcomes on one lane arrive in order; across lanes they interleave.
        assert {k: sorted(v) for k, v in seen.items()} == {
            k: sorted(v) for k, v in expected.items()
        }
        assert_usable(sock)


@pytest.fixture(scope="module")
def other_ids(gateway: FuzzGateway) -> dict[str, str]:
    """Ids alice may not continue: bob's response, her own responses that did not
    complete (incomplete; a request refused before it started has no id), and one not
    yet created."""
    bob = create(gateway, "bob")
    assert bob["type"] in RAN
    incomplete = create(gateway, "alice", input="tell me a long story " * 20)
    assert incomplete["type"] == "response.incomplete"
    return {
        "another tenant's": bob["response"]["id"],
        "incomplete": incomplete["response"]["id"],
        "future": "resp_" + secrets.token_hex(24),
    }


@FUZZ
@given(which=st.sampled_from(["another tenant's", "future"]), lane=LANE, http_too=st.booleans())
def test_previous_response_id_alice_cannot_see(
    gateway: FuzzGateway,
    no_server_errors: None,
    other_ids: dict[str, str],
    which: str,
    lane: str | None,
    http_too: bool,
) -> None:
    """Another tenant's id is not found, as one never created: the same 400
    ``previous_response_not_found`` on the request's lane, and nothing of it leaks."""
    previous = other_ids[which]
    with connect(gateway) as sock:
        body = {**VALID, "input": "continue", "previous_response_id": previous}
        if lane is not None:
            body["stream_id"] = lane
        sock.send(json.dumps(body))
        event = recv(sock)
        assert_api_error(event, {"previous_response_id"})
        assert event["status"] == 400 and event["error"]["param"] == "previous_response_id"
        assert event["error"]["code"] == "previous_response_not_found"
        assert event["error"]["message"] == f"Previous response with id '{previous}' not found."
        assert event.get("stream_id") == lane
        if http_too:
            reply = httpx.get(
                f"{gateway.base}/v1/responses/{previous}", headers=gateway.headers(), timeout=10
            )
            assert reply.status_code == 404 and reply.json()["error"]["param"] == "response_id"
        assert_usable(sock)


def test_previous_response_id_of_a_response_that_did_not_complete(
    gateway: FuzzGateway, no_server_errors: None, other_ids: dict[str, str]
) -> None:
    """An incomplete response continues as any stored one (the API allows it)."""
    with connect(gateway) as sock:
        sock.send(
            json.dumps({**VALID, "input": "go on", "previous_response_id": other_ids["incomplete"]})
        )
        assert until_terminal(sock)[-1]["type"] in RAN
        assert_usable(sock)


@pytest.fixture(scope="module")
def failing_gateway(stack, tmp_path_factory) -> Iterator[FuzzGateway]:
    """A gateway whose only worker fails every generation (its router routes to nothing
    else): its responses end ``response.failed``."""
    worker_port, router_port = free_port(), free_port()
    worker = start_service(
        "worker",
        {
            "TURNPIKE_WORKER_PORT": str(worker_port),
            "TURNPIKE_WORKER_ID": "failing",
            "TURNPIKE_WORKER_ERROR_RATE": "1.0",
        },
    )
    router = start_service(
        "router",
        {
            "TURNPIKE_ROUTER_PORT": str(router_port),
            "TURNPIKE_WORKERS": f"failing=127.0.0.1:{worker_port}",
        },
    )
    gateway = None
    try:
        gateway = start_fuzz_gateway(
            stack,
            tmp_path_factory.mktemp("fuzz-ws-failing") / "gateway.log",
            TURNPIKE_ROUTER_ADDR=f"127.0.0.1:{router_port}",
        )
        # The router routes once its health check has seen the worker (about a second).
        deadline = time.monotonic() + 20
        while (first := create(gateway))["type"] == "error" and time.monotonic() < deadline:
            time.sleep(0.3)
        assert first["type"] == "response.failed", first
        yield gateway
    finally:
        if gateway is not None:
            stop_fuzz_gateway(gateway)
        for proc in (router, worker):
            stop(proc)


@pytest.mark.parametrize("lane", [None, "a"])
def test_previous_response_id_of_a_failed_response(
    failing_gateway: FuzzGateway, lane: str | None
) -> None:
    """A failed response's id, continued: the request ends with an error or a failed
    response on its lane, and the socket goes on (a warm-up, which needs no worker, then
    completes); the log holds no server error."""
    start = failing_gateway.log_size()
    failed = create(failing_gateway)
    assert failed["type"] == "response.failed", failed
    with connect(failing_gateway) as sock:
        body = {**VALID, "input": "again", "previous_response_id": failed["response"]["id"]}
        if lane is not None:
            body["stream_id"] = lane
        sock.send(json.dumps(body))
        last = until_terminal(sock)[-1]
        assert last["type"] in ("error", "response.failed"), last
        assert last.get("stream_id") == lane
        if last["type"] == "error":
            assert_api_error(last, {"previous_response_id", "input", "model"})
        sock.send(json.dumps({**VALID, "input": "warm up", "generate": False}))
        assert until_terminal(sock)[-1]["type"] == "response.completed"
    assert failing_gateway.alive()
    assert failing_gateway.server_errors(start) == []
