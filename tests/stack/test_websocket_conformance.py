"""WebSocket mode against OpenAI's published rules (issue 22), on a real gateway with raw
frames: lanes, their limits and codes, the connection cache's eviction, ``generate:
false``, acknowledgements and the 426 refusal. Each test names the rule it holds; the
steering rules are in ``test_steering_over_websocket`` (and, one by one, the protocol
core's ``tests/unit/gateway/test_websocket_steering.py``), the inject rules in
``test_inject_over_websocket`` (``test_websocket_injection.py``), and a drain's in
``test_gateway_process`` and ``tests/containers/test_rolling_restart.py``.

Where OpenAI's documents leave a choice open, the test says which one Turnpike made
(docs/api.md, "WebSocket mode").
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from support.gateway_process import own_gateway
from support.raw_calls import send, until_terminal, ws
from support.wire import TERMINAL
from websockets.exceptions import ConnectionClosedOK, InvalidStatus
from websockets.sync.client import connect as ws_connect
from websockets.sync.connection import Connection

from turnpike.devstack import StackEndpoints

pytestmark = pytest.mark.stack

MAX_IN_FLIGHT = 16  # OpenAI's figure, and TURNPIKE_WS_MAX_ACTIVE_RESPONSES's default
MAX_LANES = 32  # distinct named lanes; the default lane does not count
SLOW = "turnpike-sim-65"  # 65 tokens/s: a response of 100 words lasts about 1.5 s
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def recv(sock: Connection, timeout: float = 30) -> dict[str, Any]:
    event: dict[str, Any] = json.loads(sock.recv(timeout=timeout))
    return event


def error_of(event: dict[str, Any]) -> tuple[int, str, str | None]:
    assert event["type"] == "error", event
    return event["status"], event["error"]["code"], event["error"].get("param")


def completed(sock: Connection, **body: Any) -> dict[str, Any]:
    """Send a create on ``body``'s lane and return its completed response."""
    send(sock, **body)
    events = until_terminal(sock)
    assert events[-1]["type"] == "response.completed", events[-1]
    response: dict[str, Any] = events[-1]["response"]
    return response


def test_twenty_lanes_run_sixteen_at_once_and_queue_the_rest(stack: StackEndpoints) -> None:
    """16 responses in flight per connection; further creates queue, never refused, and
    lanes interleave. Every event of a named lane carries its stream_id."""
    lanes = [f"lane-{i}" for i in range(20)]
    with ws(stack) as sock:
        for lane in lanes:
            send(sock, model=SLOW, input="answer in 100 words", stream_id=lane)
        running: set[str] = set()
        done: set[str] = set()
        peak = 0
        while len(done) < len(lanes):
            event = recv(sock)
            lane = event.get("stream_id", "")
            assert lane in lanes, event  # every event names its lane
            if event["type"] == "response.created":
                running.add(lane)
                peak = max(peak, len(running))
            elif event["type"] in TERMINAL:
                assert event["type"] == "response.completed", event
                running.discard(lane)
                done.add(lane)
    assert peak == MAX_IN_FLIGHT


def test_the_default_lane_carries_no_stream_id(stack: StackEndpoints) -> None:
    with ws(stack) as sock:
        send(sock, input="hello")
        events = until_terminal(sock)
    assert events[-1]["type"] == "response.completed"
    assert all("stream_id" not in event for event in events)


def test_the_33rd_named_lane_is_refused_and_the_default_lane_does_not_count(
    stack: StackEndpoints,
) -> None:
    with ws(stack) as sock:
        for i in range(MAX_LANES):
            completed(sock, input="hi", generate=False, stream_id=f"s{i}")
        completed(sock, input="hi", generate=False)  # the default lane is not one of them
        send(sock, input="hi", stream_id="one-too-many")
        event = recv(sock)
        assert error_of(event) == (400, "websocket_stream_limit_reached", "stream_id")
        assert event["stream_id"] == "one-too-many"
        # A lane already named stays usable, and the socket open.
        assert completed(sock, input="hi", stream_id="s0")["status"] == "completed"


@pytest.mark.parametrize("stream_id", ["", "has space", "x" * 257, "ünïcode"])
def test_a_malformed_stream_id_is_invalid_stream_id(stack: StackEndpoints, stream_id: str) -> None:
    with ws(stack) as sock:
        send(sock, input="hi", stream_id=stream_id)
        event = recv(sock)
        assert error_of(event) == (400, "invalid_stream_id", "stream_id")
        assert event["error"]["type"] == "invalid_request_error"
        assert "stream_id" not in event  # not a lane: nothing to echo
        assert completed(sock, input="still open")["status"] == "completed"


def test_an_unknown_parent_with_store_false_fails_before_any_work(stack: StackEndpoints) -> None:
    with ws(stack) as sock:
        send(sock, input="hi", store=False, previous_response_id="resp_unknown", stream_id="a")
        event = recv(sock)  # the very first event: no response.created before it
        assert error_of(event) == (400, "previous_response_not_found", "previous_response_id")
        assert event["stream_id"] == "a"
        assert "resp_unknown" in event["error"]["message"]


def test_a_failed_same_lane_continuation_evicts_its_parent(stack: StackEndpoints) -> None:
    orphan = [{"type": "function_call_output", "call_id": "call_nope", "output": "x"}]
    with ws(stack) as sock:
        parent = completed(sock, input="hi", store=False, stream_id="a")["id"]
        send(sock, input=orphan, store=False, previous_response_id=parent, stream_id="a")
        assert error_of(recv(sock))[0] == 400
        send(sock, input="again", store=False, previous_response_id=parent, stream_id="a")
        assert error_of(recv(sock)) == (400, "previous_response_not_found", "previous_response_id")


def test_a_failed_fork_on_another_lane_keeps_the_shared_parent(stack: StackEndpoints) -> None:
    orphan = [{"type": "function_call_output", "call_id": "call_nope", "output": "x"}]
    with ws(stack) as sock:
        parent = completed(sock, input="hi", store=False, stream_id="a")["id"]
        send(sock, input=orphan, store=False, previous_response_id=parent, stream_id="b")
        event = recv(sock)
        assert error_of(event)[0] == 400 and event["stream_id"] == "b"
        child = completed(sock, input="on", store=False, previous_response_id=parent, stream_id="a")
        assert child["previous_response_id"] == parent


def test_generate_false_prepares_state_with_no_output_and_chains(stack: StackEndpoints) -> None:
    with ws(stack) as sock:
        send(sock, input="warm up", generate=False, tools=[TOOL], instructions="Be brief.")
        events = until_terminal(sock)
        assert [e["type"] for e in events] == [
            "response.created",
            "response.in_progress",
            "response.completed",
        ]
        warm = events[-1]["response"]
        assert warm["output"] == []
        assert warm["usage"]["input_tokens"] == warm["usage"]["output_tokens"] == 0
        follow = completed(sock, input="now answer", previous_response_id=warm["id"])
        assert follow["previous_response_id"] == warm["id"] and follow["output"]


def test_an_acknowledgement_is_ignored_and_an_unknown_type_is_an_error_on_its_lane(
    stack: StackEndpoints,
) -> None:
    with ws(stack) as sock:
        response = completed(sock, input="hi")
        sock.send(json.dumps({"type": "response.processed", "response_id": response["id"]}))
        sock.send(json.dumps({"type": "response.later", "stream_id": "b"}))
        event = recv(sock)  # the acknowledgement had no answer: this is the unknown type's
        assert error_of(event) == (400, "unknown_event_type", "type")
        assert event["stream_id"] == "b"
        assert completed(sock, input="still open")["status"] == "completed"


@pytest.fixture(scope="module")
def websocket_off(stack: StackEndpoints, tmp_path_factory) -> Iterator[str]:
    yield from own_gateway(stack, tmp_path_factory, "ws-off", TURNPIKE_WEBSOCKET_MODE="false")


def test_an_upgrade_the_server_will_not_take_is_426_in_the_api_shape(websocket_off: str) -> None:
    """426 is what moves Codex to HTTP for the session; the body is the API's error."""
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(websocket_off, additional_headers={"Authorization": "Bearer sk-turnpike-dev"})
    reply = refused.value.response
    assert reply.status_code == 426
    body = json.loads(reply.body or b"{}")
    assert body["error"]["code"] == "websocket_unavailable"
    assert body["error"]["type"] == "invalid_request_error"


@pytest.fixture(scope="module")
def short_lived(stack: StackEndpoints, tmp_path_factory) -> Iterator[str]:
    yield from own_gateway(stack, tmp_path_factory, "ws-lifetime", TURNPIKE_WS_MAX_LIFETIME_S="2")


def test_past_its_lifetime_a_connection_refuses_creates_and_closes_with_1001(
    short_lived: str,
) -> None:
    """websocket_connection_limit_reached, status 400, no param; then close 1001, on which
    the official clients reconnect."""
    with ws_connect(
        short_lived, additional_headers={"Authorization": "Bearer sk-turnpike-dev"}
    ) as sock:
        send(sock, model=SLOW, input="answer in 200 words", stream_id="long")
        assert recv(sock)["type"] == "response.created"
        time.sleep(2.2)
        send(sock, input="too late", stream_id="late")
        events: list[dict[str, Any]] = []
        with pytest.raises(ConnectionClosedOK) as closed:
            while True:
                events.append(recv(sock))
    refusal = next(e for e in events if e.get("stream_id") == "late")
    assert error_of(refusal) == (400, "websocket_connection_limit_reached", None)
    # The running response finished before the close: never cut in the middle.
    assert [e["type"] for e in events if e.get("stream_id") == "long"][-1] == "response.completed"
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1001


def stored(stack: StackEndpoints, response_id: str, **params: str) -> httpx.Response:
    url = f"{stack.base_url}/responses/{response_id}"
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    return httpx.get(url, params=params, headers=headers, timeout=30)


def start_long(sock: Connection) -> list[dict[str, Any]]:
    """A stored response of several seconds, read up to its third event."""
    send(sock, model=SLOW, input="answer in 200 words", stream_id="long")
    return [recv(sock) for _ in range(3)]


def test_a_stored_response_survives_its_dropped_socket_and_resumes_over_http(
    stack: StackEndpoints,
) -> None:
    """Past OpenAI's protocol: a socket lost without a close frame (a network cut, a
    killed client) leaves its stored response running; its events are replayed from a
    sequence number, then followed live, as a background response's are."""
    sock = ws(stack)
    seen = start_long(sock)
    response_id = seen[0]["response"]["id"]
    sock.socket.shutdown(socket.SHUT_RDWR)  # no close frame
    sock.socket.close()
    after = seen[-1]["sequence_number"]
    replayed = []
    with httpx.stream(
        "GET",
        f"{stack.base_url}/responses/{response_id}",
        params={"stream": "true", "starting_after": str(after)},
        headers={"Authorization": f"Bearer {stack.api_key}"},
        timeout=30,
    ) as reply:
        assert reply.status_code == 200, reply.read()
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                replayed.append(json.loads(line[len("data: ") :]))
    numbers = [e["sequence_number"] for e in replayed]
    assert numbers == list(range(after + 1, after + 1 + len(numbers)))  # no gap, no repeat
    assert replayed[-1]["type"] == "response.completed"
    assert all("stream_id" not in e for e in replayed)  # lanes belong to the socket
    assert stored(stack, response_id).json()["status"] == "completed"


def test_a_client_that_closes_its_socket_stops_its_responses(stack: StackEndpoints) -> None:
    """Closing the socket (a close frame) is how a client stops a response."""
    with ws(stack) as sock:
        response_id = start_long(sock)[0]["response"]["id"]
    deadline = time.monotonic() + 10
    while stored(stack, response_id).json()["status"] == "in_progress":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert stored(stack, response_id).json()["status"] == "cancelled"
