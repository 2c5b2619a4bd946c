"""Bad input gets a clear error in the API's own shape: never a 500, a hang or
a silently closed socket. One tenant never sees another's responses."""

from __future__ import annotations

import json

import httpx
import pytest
from support.raw_calls import expect_error, post, send, until_terminal, ws
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect as ws_connect

pytestmark = pytest.mark.stack

ALICE = "sk-test-alice"
BOB = "sk-test-bob"


# HTTP --------------------------------------------------------------------------


def test_missing_key_is_401(stack):
    expect_error(post(stack, {"input": "x"}, key=False), 401, "invalid_api_key")


def test_wrong_key_is_401(stack):
    error = expect_error(
        post(stack, {"input": "x"}, key="sk-wrong-key-123456"), 401, "invalid_api_key"
    )
    assert "sk-wrong-key-123456" not in error["message"]


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b'{"input": "x",', "invalid_json"),
        (b'{"input": "\\ud800"}', "invalid_unicode"),  # a lone surrogate: not text
        (b'{"input": "x", "temperature": NaN}', "invalid_json"),
        (b"[" * 10_000 + b"]" * 10_000, "json_too_deep"),  # nesting no parser should follow
        (b'{"input": "\xff"}', "invalid_json"),  # not UTF-8
    ],
    ids=["truncated", "lone-surrogate", "nan", "deep-nesting", "not-utf8"],
)
def test_malformed_json_is_400(stack, raw, code):
    expect_error(post(stack, None, raw=raw), 400, code)


def test_wrong_type_is_400_not_422(stack):
    expect_error(post(stack, {"input": "x", "temperature": "warm"}), 400, param="temperature")
    expect_error(post(stack, {"input": 42}), 400, param="input")


def test_unknown_model(stack):
    expect_error(
        post(stack, {"model": "no-such-model", "input": "x"}), 400, "model_not_found", "model"
    )


def test_unknown_previous_response_id(stack):
    expect_error(
        post(stack, {"input": "x", "previous_response_id": "resp_missing"}),
        400,
        "previous_response_not_found",
        "previous_response_id",
    )


def test_function_call_output_without_a_call(stack):
    body = {"input": [{"type": "function_call_output", "call_id": "call_nope", "output": "x"}]}
    expect_error(post(stack, body), 400, "invalid_function_call_output")


@pytest.mark.parametrize(
    "tool, param",
    [
        ({"description": " " * 2000}, "tools[1].description"),
        ({"parameters": {"type": "object", "description": "a" * 2000}}, "tools[1].parameters"),
    ],
)
@pytest.mark.parametrize("path", ["/responses", "/responses/input_tokens"])
def test_tool_text_the_tokenizer_refuses_names_the_tool(stack, tool, param, path):
    """A tool's text without word boundaries is the client's to fix: the 400 points at that
    tool's field, not at the input."""
    tools = [{"type": "function", "name": "fine"}, {"type": "function", "name": "f", **tool}]
    reply = post(stack, {"input": "x", "tools": tools}, path=path)
    error = expect_error(reply, 400, param=param)
    assert "word boundary" in error["message"]


def test_body_over_the_limit_is_413(stack):
    big = {"input": "x" * (stack.max_body_bytes + 10)}
    expect_error(post(stack, big), 413, "request_too_large")


def test_unknown_route_is_404_in_the_error_shape(stack):
    reply = httpx.get(
        f"{stack.base_url}/nothing-here", headers={"Authorization": f"Bearer {stack.api_key}"}
    )
    expect_error(reply, 404)


def test_unknown_response_id_is_404(stack):
    reply = httpx.get(
        f"{stack.base_url}/responses/resp_nope",
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )
    expect_error(reply, 404, "response_not_found")


def test_tenants_cannot_see_each_others_responses(stack):
    created = post(stack, {"input": "alice's secret"}, key=ALICE)
    assert created.status_code == 200
    rid = created.json()["id"]
    bob = {"Authorization": f"Bearer {BOB}"}
    alice = {"Authorization": f"Bearer {ALICE}"}
    expect_error(httpx.get(f"{stack.base_url}/responses/{rid}", headers=bob), 404)
    expect_error(httpx.get(f"{stack.base_url}/responses/{rid}/input_items", headers=bob), 404)
    expect_error(
        post(stack, {"input": "x", "previous_response_id": rid}, key=BOB),
        400,
        "previous_response_not_found",
    )
    expect_error(httpx.delete(f"{stack.base_url}/responses/{rid}", headers=bob), 404)
    # Still there for its owner.
    assert httpx.get(f"{stack.base_url}/responses/{rid}", headers=alice).status_code == 200


# WebSocket ---------------------------------------------------------------------


def test_websocket_frames_are_not_compressed_unless_configured(stack):
    """permessage-deflate costs more CPU per event than it saves on a data-centre network;
    the gateway declines it unless TURNPIKE_WS_PER_MESSAGE_DEFLATE is set."""
    with ws(stack, compression="deflate") as sock:
        assert sock.protocol.extensions == []
        send(sock, input="hello")
        assert until_terminal(sock)[-1]["type"] == "response.completed"


def test_websocket_upgrade_without_a_valid_key_is_refused(stack):
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
        with pytest.raises(InvalidStatus) as err:
            ws_connect(stack.ws_url, additional_headers=headers, open_timeout=10)
        assert err.value.response.status_code == 401


@pytest.mark.parametrize(
    ("frame", "status", "code"),
    [
        ("{broken", 400, "invalid_json"),
        ('{"type": "response.create", "input": "\\ud800"}', 400, "invalid_unicode"),
        ("[" * 10_000 + "]" * 10_000, 400, "json_too_deep"),
        (
            json.dumps({"type": "response.create", "input": "x", "top_p": "high"}),
            400,
            "invalid_type",
        ),
        (
            json.dumps({"type": "response.create", "input": "x", "model": "nope"}),
            400,
            "model_not_found",
        ),
        (
            json.dumps(
                {"type": "response.create", "input": "x", "previous_response_id": "resp_gone"}
            ),
            400,
            "previous_response_not_found",
        ),
        (
            json.dumps(
                {
                    "type": "response.create",
                    "input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}],
                }
            ),
            400,
            "invalid_function_call_output",
        ),
        (
            json.dumps({"type": "response.create", "input": "x", "background": True}),
            400,
            "unsupported_parameter",
        ),
        (json.dumps({"type": "what.is.this"}), 400, "unknown_event_type"),
    ],
)
def test_websocket_request_errors_keep_the_socket_usable(stack, frame, status, code):
    with ws(stack) as sock:
        sock.send(frame)
        [event] = until_terminal(sock)
        assert event["type"] == "error" and event["status"] == status
        assert event["error"]["code"] == code
        send(sock, input="still there?")
        assert until_terminal(sock)[-1]["type"] == "response.completed"


def test_websocket_oversized_frame_is_an_error_event(stack):
    with ws(stack) as sock:
        send(sock, input="x" * (stack.max_frame_bytes + 10))
        [event] = until_terminal(sock)
        assert event["status"] == 413 and event["error"]["code"] == "request_too_large"
        send(sock, input="ok")
        assert until_terminal(sock)[-1]["type"] == "response.completed"


def test_websocket_creates_on_a_busy_lane_run_in_order(stack):
    """Lanes are FIFO: a create on a busy lane waits for the terminal event, then runs;
    an invalid one is answered at once and takes no place in the queue."""
    with ws(stack) as sock:
        # Seconds of generation at 65 tokens/s: the lane is busy when the others arrive.
        send(sock, input="Tell me a story in 300 words", stream_id="lane1", model="turnpike-sim-65")
        send(sock, input="second", stream_id="lane1")
        send(sock, input="bad", stream_id="lane1", temperature="hot")
        first = until_terminal(sock)
        assert first[-1]["type"] == "error" and first[-1]["error"]["param"] == "temperature"
        assert first[-1]["stream_id"] == "lane1"
        first += until_terminal(sock)
        assert first[-1]["type"] == "response.completed"
        second = until_terminal(sock)
        assert (
            second[0]["type"] == "response.created" and second[-1]["type"] == "response.completed"
        )
        assert second[-1]["response"]["id"] != first[-1]["response"]["id"]
        assert all(e.get("stream_id") == "lane1" for e in first + second)


def test_websocket_tenant_isolation(stack):
    with ws(stack, key=ALICE) as sock:
        send(sock, input="alice on a socket", store=True)
        rid = until_terminal(sock)[-1]["response"]["id"]
    with ws(stack, key=BOB) as sock:
        send(sock, input="x", previous_response_id=rid)
        [event] = until_terminal(sock)
        assert event["error"]["code"] == "previous_response_not_found"


def test_websocket_store_false_continues_only_on_its_connection(stack):
    with ws(stack) as sock:
        send(sock, input="ephemeral", store=False)
        rid = until_terminal(sock)[-1]["response"]["id"]
        send(sock, input="continue", previous_response_id=rid, store=False)
        assert until_terminal(sock)[-1]["type"] == "response.completed"
    with ws(stack) as sock:
        send(sock, input="continue", previous_response_id=rid)
        [event] = until_terminal(sock)
        assert event["error"]["code"] == "previous_response_not_found"


def test_websocket_continues_a_stored_http_response(stack):
    rid = post(stack, {"input": "stored over http"}).json()["id"]
    with ws(stack) as sock:
        send(sock, input="continue on a socket", previous_response_id=rid)
        final = until_terminal(sock)[-1]
        assert final["type"] == "response.completed"
        assert final["response"]["previous_response_id"] == rid
