"""Conversations are bounded in items and bytes, and no request builds a gRPC message over
the channel's limit (issue 19, defect 3).

The probe: 56 appends of 20 items each made one conversation of 74 MB; its next turn sent
all of it to safety, whose channel refused the message (RESOURCE_EXHAUSTED), and the
client got a retryable 503. Here at a small scale: a gateway of its own (``bounded``: 200
items, 256 KiB per conversation, 4 MiB gRPC messages) beside a safety service of its own
that takes 1 MiB messages at most (the gateway's channel would send more). Also there: a
turn's output may take its conversation past the bound; a chain of ``previous_response_id``
turns (HTTP and WebSocket) is bounded alike; a long function name can no longer multiply a
request's size.

Without a stack: the engine refuses a turn past the bounds before any backend call, on
every pipeline; ``Backends.call`` against a real gRPC server tells a message over the
size limit (the client's 400) from an outage or an overloaded service (a 503).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import grpc
import httpx
import pytest
from support.billing_standin import recording_outbox
from support.gateway_process import start_gateway, stop
from support.gateway_standins import StandIns, context, create, message, prepare
from support.openresponses import validate_error_body
from support.procs import free_port, start_service
from support.wire import TERMINAL
from websockets.sync.client import connect as ws_connect

from turnpike.catalogue import service
from turnpike.config import ConfigError, Endpoints, GatewaySettings
from turnpike.conversation.v1 import conversation_pb2
from turnpike.gateway.engine.response_engine import ResponseEngine
from turnpike.gateway.pipeline.stages import Resources
from turnpike.gateway.pipeline.variants import CONNECTION, LEGACY, SPRINT
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.items import normalize_input, to_proto
from turnpike.gateway.state.connection_cache import ConnectionCache
from turnpike.gateway.state.conversation_bounds import ConversationBounds, items_bytes
from turnpike.gateway.state.conversation_state import ConversationState
from turnpike.gateway.state.conversations import InMemoryConversationStore, new_conversation
from turnpike.gateway.state.model_cache import ModelConfigCache
from turnpike.gateway.state.responses import StoredResponse
from turnpike.gateway.state.responses_memory import InMemoryResponseStore
from turnpike.gateway.state.token_cache import TokenCache
from turnpike.gateway.upstream.backends import Backends
from turnpike.grpc_client import wait_healthy
from turnpike.image_resolution import Limits
from turnpike.safety.v1 import safety_pb2, safety_pb2_grpc

MAX_ITEMS = 200
MAX_BYTES = 256 * 1024
GATEWAY_GRPC_BYTES = 4 * 1024 * 1024
SAFETY_GRPC_BYTES = 1024 * 1024
MODEL = "turnpike-sim-4000"


# -- a gateway of its own, and a safety service that takes 1 MiB ------------------------


@pytest.fixture(scope="module")
def bounded(stack) -> Iterator[str]:
    """The API base (``.../v1``) of a gateway with small bounds, whose safety service
    refuses messages over 1 MiB."""
    safety_port = free_port()
    safety = start_service(
        "safety",
        {
            service("safety").port_variable: str(safety_port),
            "TURNPIKE_GRPC_MAX_MESSAGE_BYTES": str(SAFETY_GRPC_BYTES),
        },
    )
    gateway = None
    try:
        address = f"127.0.0.1:{safety_port}"
        assert asyncio.run(wait_healthy(address, timeout=60)), "safety did not start"
        gateway, base = start_gateway(
            stack,
            TURNPIKE_SAFETY_ADDR=address,
            TURNPIKE_MAX_CONVERSATION_ITEMS=str(MAX_ITEMS),
            TURNPIKE_MAX_CONVERSATION_BYTES=str(MAX_BYTES),
            TURNPIKE_GRPC_MAX_MESSAGE_BYTES=str(GATEWAY_GRPC_BYTES),
        )
        yield base + "/v1"
    finally:
        if gateway is not None:
            stop(gateway)
        stop(safety)


def call(base: str, method: str, path: str, body: dict | None = None) -> httpx.Response:
    return httpx.request(
        method,
        base + path,
        content=None if body is None else json.dumps(body, ensure_ascii=False).encode(),
        headers={"Authorization": "Bearer sk-turnpike-dev", "Content-Type": "application/json"},
        timeout=120,
    )


def expect_error(reply: httpx.Response, status: int, code: str, param: str | None) -> dict:
    assert reply.status_code == status, reply.text[:500]
    body = reply.json()
    validate_error_body(body)
    assert (body["error"]["code"], body["error"]["param"]) == (code, param), body
    return body["error"]


def text_items(count: int, chars: int) -> list[dict]:
    return [
        {"type": "message", "role": "user", "content": "lorem " * (chars // 6)}
        for _ in range(count)
    ]


def all_items(base: str, conversation_id: str) -> list[dict]:
    items, after = [], None
    while True:
        query = f"?limit=100&order=asc{f'&after={after}' if after else ''}"
        page = call(base, "GET", f"/conversations/{conversation_id}/items{query}").json()
        items += page["data"]
        if not page["has_more"]:
            return items
        after = page["last_id"]


# -- the probe, over HTTP ----------------------------------------------------------------


@pytest.mark.stack
def test_the_probe_is_refused_at_the_bound_and_the_next_turn_completes(bounded) -> None:
    conversation = call(bounded, "POST", "/conversations", {}).json()["id"]
    replies = []
    for _ in range(56):  # the probe's appends, of 20 items of ~1.4 KB each
        reply = call(
            bounded, "POST", f"/conversations/{conversation}/items", {"items": text_items(20, 1400)}
        )
        replies.append(reply)
        if reply.status_code != 200:
            break
    # The turn after: within the bounds it completes; never a retryable 503 (before the
    # fix: all 56 appends were taken, and this turn was a 503 service_unavailable).
    turn = call(
        bounded,
        "POST",
        "/responses",
        {"model": MODEL, "conversation": conversation, "input": "next", "max_output_tokens": 16},
    )
    assert turn.status_code == 200, turn.text[:500]
    assert turn.json()["status"] in ("completed", "incomplete")  # max_output_tokens

    taken = [r for r in replies if r.status_code == 200]
    assert 0 < len(taken) < 56
    error = expect_error(replies[-1], 400, "conversation_too_large", "items")
    assert f"over the limit of {MAX_BYTES} bytes" in error["message"]
    assert "/v1/responses/compact" in error["message"]
    # Refused whole: the conversation holds the taken appends and the turn, no more.
    items = all_items(bounded, conversation)
    assert len(items) == 20 * len(taken) + 1 + len(turn.json()["output"])
    before_turn = items[: 20 * len(taken)]
    assert items_bytes(before_turn) <= MAX_BYTES

    # A turn whose input would take it past the bound: the same 400, naming the conversation.
    over = call(
        bounded,
        "POST",
        "/responses",
        {"model": MODEL, "conversation": conversation, "input": text_items(20, 1400)},
    )
    error = expect_error(over, 400, "conversation_too_large", "conversation")
    assert conversation in error["message"] and f"{MAX_BYTES} bytes" in error["message"]


def message_bytes(text: str) -> int:
    """The stored size of a user message of ``text`` (ids are all as long)."""
    return items_bytes(normalize_input(text, "input"))


@pytest.mark.stack
def test_a_turns_output_may_take_its_conversation_past_the_bound(bounded) -> None:
    """The input must fit; the output, bounded by max_output_tokens, goes in past the
    bound (refusing it would lose a response the client has), and the next turn is
    refused."""
    conversation = call(bounded, "POST", "/conversations", {}).json()["id"]
    for _ in range(8):
        reply = call(
            bounded, "POST", f"/conversations/{conversation}/items", {"items": text_items(20, 1400)}
        )
        assert reply.status_code == 200, reply.text[:500]
    # A filler that leaves room for the turn's input and a few bytes more.
    room = MAX_BYTES - items_bytes(all_items(bounded, conversation))
    filler = "f" * (room - message_bytes("next") - 10 - message_bytes(""))
    reply = call(
        bounded,
        "POST",
        f"/conversations/{conversation}/items",
        {"items": [{"type": "message", "role": "user", "content": filler}]},
    )
    assert reply.status_code == 200, reply.text[:500]
    assert MAX_BYTES - items_bytes(all_items(bounded, conversation)) == message_bytes("next") + 10

    body = {"model": MODEL, "conversation": conversation, "max_output_tokens": 16}
    turn = call(bounded, "POST", "/responses", {**body, "input": "next"})
    assert turn.status_code == 200, turn.text[:500]
    items = all_items(bounded, conversation)
    assert items[-1]["id"] == turn.json()["output"][-1]["id"]
    assert items_bytes(items) > MAX_BYTES
    expect_error(
        call(bounded, "POST", "/responses", {**body, "input": "again"}),
        400,
        "conversation_too_large",
        "conversation",
    )


@pytest.mark.stack
def test_items_are_bounded_too(bounded) -> None:
    conversation = call(bounded, "POST", "/conversations", {"items": text_items(20, 6)}).json()
    appended = 20
    while appended < MAX_ITEMS:
        reply = call(
            bounded,
            "POST",
            f"/conversations/{conversation['id']}/items",
            {"items": text_items(20, 6)},
        )
        assert reply.status_code == 200, reply.text[:500]
        appended += 20
    reply = call(
        bounded, "POST", f"/conversations/{conversation['id']}/items", {"items": text_items(1, 6)}
    )
    error = expect_error(reply, 400, "conversation_too_large", "items")
    assert f"{MAX_ITEMS + 1} items, over the limit of {MAX_ITEMS} items" in error["message"]
    assert len(all_items(bounded, conversation["id"])) == MAX_ITEMS
    # A turn would add its input: refused before any backend call.
    turn = call(
        bounded,
        "POST",
        "/responses",
        {"model": MODEL, "conversation": conversation["id"], "input": "hi"},
    )
    expect_error(turn, 400, "conversation_too_large", "conversation")
    # Deleting an item makes room.
    first = all_items(bounded, conversation["id"])[0]["id"]
    assert (
        call(bounded, "DELETE", f"/conversations/{conversation['id']}/items/{first}").status_code
        == 200
    )
    reply = call(
        bounded, "POST", f"/conversations/{conversation['id']}/items", {"items": text_items(1, 6)}
    )
    assert reply.status_code == 200, reply.text[:500]


@pytest.mark.stack
def test_a_new_conversation_past_the_bound_is_refused(bounded) -> None:
    reply = call(bounded, "POST", "/conversations", {"items": text_items(20, 16_000)})
    error = expect_error(reply, 400, "conversation_too_large", "items")
    assert f"over the limit of {MAX_BYTES} bytes" in error["message"]


# -- chains of responses -----------------------------------------------------------------

# Whitespace tokenizes to a token per 128 characters: a chain of turns grows by ~100 KB
# each for a few hundred tokens, and with truncation "auto" the context window never
# stops it. Only the bytes bound does, before the whole history reaches safety.
SPACES = " " * 100_000


def chain_body(previous: str | None) -> dict:
    """A turn of a chain that grows by ~100 KB of whitespace."""
    body = {
        "model": MODEL,
        "input": f"more{SPACES}text",
        "truncation": "auto",
        "max_output_tokens": 16,
    }
    if previous is not None:
        body["previous_response_id"] = previous
    return body


def chain_turn(base: str, previous: str | None) -> httpx.Response:
    return call(base, "POST", "/responses", chain_body(previous))


@pytest.mark.stack
def test_a_chain_of_responses_is_bounded_before_safety_sees_it(bounded) -> None:
    """Before the fix: the chain grew until its history, sent whole to safety, was over
    the 1 MiB a safety message may be, and the turn was a 503."""
    previous, turns = None, 0
    for _ in range(16):
        reply = chain_turn(bounded, previous)
        if reply.status_code != 200:
            break
        previous, turns = reply.json()["id"], turns + 1
    assert turns >= 2
    error = expect_error(reply, 400, "conversation_too_large", "previous_response_id")
    assert previous in error["message"] and f"{MAX_BYTES} bytes" in error["message"]


@pytest.mark.stack
def test_a_chain_over_a_websocket_is_bounded_too(bounded) -> None:
    """Continued from the connection's cache, a turn measures only its own input."""
    url = bounded.replace("http://", "ws://") + "/responses"
    with ws_connect(
        url, additional_headers={"Authorization": "Bearer sk-turnpike-dev"}, max_size=None
    ) as sock:

        def turn(previous: str | None) -> dict:
            sock.send(json.dumps({"type": "response.create", **chain_body(previous)}))
            while True:
                event = json.loads(sock.recv(timeout=120))
                if event["type"] in TERMINAL:
                    return event

        previous, turns = None, 0
        for _ in range(16):
            event = turn(previous)
            if event["type"] not in ("response.completed", "response.incomplete"):
                break
            previous, turns = event["response"]["id"], turns + 1
        assert turns >= 2
        assert event["type"] == "error" and event["status"] == 400, event
        assert event["error"]["code"] == "conversation_too_large"
        assert event["error"]["param"] == "previous_response_id"
        # The socket stays usable.
        sock.send(json.dumps({"type": "response.create", "model": MODEL, "input": "hi"}))
        while (event := json.loads(sock.recv(timeout=120)))["type"] not in TERMINAL:
            pass
        assert event["type"] == "response.completed", event


@pytest.mark.stack
def test_a_websocket_turn_past_a_conversations_bound_is_an_error_event(bounded) -> None:
    conversation = call(bounded, "POST", "/conversations", {}).json()["id"]
    for _ in range(8):  # ~243 KB: the input below takes it past 256 KiB
        reply = call(
            bounded, "POST", f"/conversations/{conversation}/items", {"items": text_items(20, 1400)}
        )
        assert reply.status_code == 200, reply.text[:500]
    url = bounded.replace("http://", "ws://") + "/responses"
    with ws_connect(
        url, additional_headers={"Authorization": "Bearer sk-turnpike-dev"}, max_size=None
    ) as sock:
        body = {"type": "response.create", "model": MODEL, "conversation": conversation}
        sock.send(json.dumps({**body, "input": text_items(20, 1400)}))
        event = json.loads(sock.recv(timeout=120))
        assert event["type"] == "error" and event["status"] == 400, event
        assert (event["error"]["code"], event["error"]["param"]) == (
            "conversation_too_large",
            "conversation",
        )


# -- a message over the channel's limit --------------------------------------------------


@pytest.mark.stack
def test_a_request_over_the_channels_limit_is_a_400_not_a_503(bounded) -> None:
    """Four bytes a character: 300,000 characters (within the input bound) make a 1.2 MB
    message, which the safety service refuses. Before: a 503 to retry."""
    reply = call(bounded, "POST", "/responses", {"model": MODEL, "input": "\U0001f600" * 300_000})
    error = expect_error(reply, 400, "input_too_large", "input")
    assert f"over the limit of {SAFETY_GRPC_BYTES} bytes" in error["message"]


@pytest.mark.stack
def test_a_long_function_name_cannot_multiply_a_request(bounded) -> None:
    """Every tool output carries its call's function name to the backends: one long name
    and many outputs made a message hundreds of times the request (before: 60 KB of
    request, a 1.2 MB message, a 503)."""
    items = [{"type": "function_call", "call_id": "c", "name": "f" * 60_000, "arguments": "{}"}]
    items += [{"type": "function_call_output", "call_id": "c", "output": ""}] * 20
    reply = call(bounded, "POST", "/responses", {"model": MODEL, "input": items})
    error = expect_error(reply, 400, "invalid_value", "input[0].name")
    assert "256" in error["message"]


# -- without a stack: the engine, before any backend call --------------------------------


def engine_with(store: InMemoryConversationStore) -> tuple[ResponseEngine, StandIns]:
    backends = StandIns()
    resources = Resources(
        backends,
        InMemoryResponseStore(100),
        ModelConfigCache(30.0),
        TokenCache(10**6),
        Limits(),
        conversations=store,
    )
    return ResponseEngine(resources, outbox=recording_outbox()), backends


def no_backend_called(backends: StandIns) -> None:
    assert backends.safety.requests == []
    assert backends.tokenizer.calls == []
    assert backends.router.calls == []


BOUNDS = ConversationBounds(max_items=10, max_bytes=2_000)


@pytest.mark.parametrize("pipeline", [LEGACY, SPRINT, CONNECTION], ids=lambda p: p.name)
async def test_a_turn_past_a_conversations_bounds_calls_no_backend(pipeline) -> None:
    store = InMemoryConversationStore(10, bounds=BOUNDS)
    engine, backends = engine_with(store)
    conversation = new_conversation({})
    items = normalize_input(text_items(2, 600), "items")
    await store.create("acme", conversation, items)
    websocket = pipeline is CONNECTION
    fits = create(websocket, conversation=conversation.id, input="x" * 100)
    assert (await prepare(engine, fits, pipeline)).conversation is not None
    backends.safety.requests.clear()
    backends.tokenizer.calls.clear()
    backends.router.calls.clear()

    too_long = create(websocket, conversation=conversation.id, input="x" * 900)
    with pytest.raises(ApiError) as refused:
        await prepare(engine, too_long, pipeline)
    assert (refused.value.status, refused.value.code, refused.value.param) == (
        400,
        "conversation_too_large",
        "conversation",
    )
    too_many = create(websocket, conversation=conversation.id, input=text_items(9, 6))
    with pytest.raises(ApiError) as refused:
        await prepare(engine, too_many, pipeline)
    assert "11 items, over the limit of 10 items" in refused.value.message
    no_backend_called(backends)


@pytest.mark.parametrize("pipeline", [LEGACY, SPRINT, CONNECTION], ids=lambda p: p.name)
async def test_a_chain_past_the_bounds_calls_no_backend(pipeline) -> None:
    engine, backends = engine_with(InMemoryConversationStore(10, bounds=BOUNDS))
    history = [message("user", "y" * 1_500, "msg_1"), message("assistant", "ok", "msg_2")]
    response = {"id": "resp_1", "output": history[1:], "previous_response_id": None}
    await engine.res.store.put(StoredResponse("acme", response, history[:1], "affinity"))
    request = create(pipeline is CONNECTION, previous_response_id="resp_1", input="z" * 600)
    with pytest.raises(ApiError) as refused:
        await prepare(engine, request, pipeline)
    assert (refused.value.code, refused.value.param) == (
        "conversation_too_large",
        "previous_response_id",
    )
    assert "resp_1" in refused.value.message
    no_backend_called(backends)


async def test_a_cached_parent_is_bounded_by_the_bytes_it_carries() -> None:
    """A connection's cached state says how many bytes its history holds: the turn after
    it measures only its own input (and the bound holds without re-measuring)."""
    engine, backends = engine_with(InMemoryConversationStore(10, bounds=BOUNDS))
    history = [message("user", "short", "msg_1")]
    cache = ConnectionCache(4)
    state = ConversationState(
        response={"id": "resp_1"},
        history=history,
        proto_history=to_proto(history, {}),
        call_names={},
        conversation_id="resp_1",
        affinity_key="a",
        history_bytes=BOUNDS.max_bytes - 10,  # as _next_state counted it
    )
    cache.put("resp_1", state)
    request = create(True, previous_response_id="resp_1", input="hello there")
    with pytest.raises(ApiError) as refused:
        await prepare(engine, request, CONNECTION, context(CONNECTION, cache))
    assert refused.value.code == "conversation_too_large"
    no_backend_called(backends)


def test_a_function_calls_name_is_bounded() -> None:
    raw = [{"type": "function_call", "call_id": "c", "name": "f" * 257, "arguments": "{}"}]
    with pytest.raises(ApiError) as refused:
        normalize_input(raw, "input")
    assert (refused.value.code, refused.value.param) == ("invalid_value", "input[0].name")
    normalize_input([{**raw[0], "name": "f" * 256}], "input")


def test_the_bounds_are_settings_checked_against_the_grpc_limit(monkeypatch) -> None:
    settings = GatewaySettings()
    assert (settings.max_conversation_items, settings.max_conversation_bytes) == (
        ConversationBounds().max_items,
        ConversationBounds().max_bytes,
    )
    monkeypatch.setenv("TURNPIKE_MAX_CONVERSATION_BYTES", str(40 * 1024 * 1024))
    with pytest.raises(ConfigError, match="TURNPIKE_MAX_CONVERSATION_BYTES"):
        GatewaySettings()
    monkeypatch.setenv("TURNPIKE_GRPC_MAX_MESSAGE_BYTES", str(128 * 1024 * 1024))
    assert GatewaySettings().max_conversation_bytes == 40 * 1024 * 1024
    monkeypatch.setenv("TURNPIKE_MAX_CONVERSATION_ITEMS", "0")
    with pytest.raises(ConfigError, match="TURNPIKE_MAX_CONVERSATION_ITEMS"):
        GatewaySettings()


# -- Backends.call against a real gRPC server ---------------------------------------------

SERVER_LIMIT = 100_000
CLIENT_LIMIT = 200_000


class Safety(safety_pb2_grpc.SafetyServicer):
    """Answers by tenant: an overloaded service, a slow one, a reply over the client's
    limit; anything else is allowed."""

    async def Classify(self, request, context):
        if request.tenant == "overloaded":
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "too many requests")
        if request.tenant == "slow":
            await asyncio.sleep(5)
        if request.tenant == "big-reply":
            finding = safety_pb2.Finding(category="x" * (CLIENT_LIMIT + 1))
            return safety_pb2.ClassifyResponse(findings=[finding])
        return safety_pb2.ClassifyResponse(verdict=safety_pb2.ALLOW)


@pytest.fixture
async def safety_server() -> AsyncIterator[str]:
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", SERVER_LIMIT),
            ("grpc.max_send_message_length", 4 * CLIENT_LIMIT),
        ]
    )
    safety_pb2_grpc.add_SafetyServicer_to_server(Safety(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    yield f"127.0.0.1:{port}"
    await server.stop(0)


def classify(tenant: str, chars: int) -> safety_pb2.ClassifyRequest:
    return safety_pb2.ClassifyRequest(
        tenant=tenant, items=[conversation_pb2.Item(id="m", text="a" * chars)]
    )


async def call_safety(address: str, request, monkeypatch, limit: int) -> ApiError | None:
    monkeypatch.setenv("TURNPIKE_GRPC_MAX_MESSAGE_BYTES", str(limit))
    backends = Backends(Endpoints(safety=address), timeout_s=1.0)
    try:
        await backends.call("safety", backends.safety.Classify, request)
    except ApiError as err:
        return err
    finally:
        await backends.close()
    return None


async def test_a_message_over_the_clients_limit_is_the_clients_400(
    safety_server, monkeypatch
) -> None:
    err = await call_safety(safety_server, classify("t", 60_000), monkeypatch, 50_000)
    assert err is not None and (err.status, err.code, err.param) == (
        400,
        "input_too_large",
        "input",
    )
    assert "to the safety service, over the limit of 50000 bytes" in err.message


async def test_a_message_over_the_servers_limit_is_the_clients_400(
    safety_server, monkeypatch
) -> None:
    err = await call_safety(safety_server, classify("t", 150_000), monkeypatch, CLIENT_LIMIT)
    assert err is not None and (err.status, err.code) == (400, "input_too_large")
    assert f"over the limit of {SERVER_LIMIT} bytes" in err.message


async def test_a_reply_over_the_limit_is_not_retryable(safety_server, monkeypatch) -> None:
    err = await call_safety(safety_server, classify("big-reply", 10), monkeypatch, CLIENT_LIMIT)
    assert err is not None and (err.status, err.code) == (400, "input_too_large")
    assert "reply" in err.message


async def test_within_the_limits_a_call_answers(safety_server, monkeypatch) -> None:
    assert (
        await call_safety(safety_server, classify("t", 50_000), monkeypatch, CLIENT_LIMIT) is None
    )


@pytest.mark.parametrize("tenant", ["overloaded", "slow"])
async def test_an_overloaded_or_slow_service_is_still_a_503(
    safety_server, monkeypatch, tenant
) -> None:
    err = await call_safety(safety_server, classify(tenant, 10), monkeypatch, CLIENT_LIMIT)
    assert err is not None and (err.status, err.code) == (503, "service_unavailable")


async def test_a_service_away_is_still_a_503(monkeypatch) -> None:
    err = await call_safety(
        f"127.0.0.1:{free_port()}", classify("t", 10), monkeypatch, CLIENT_LIMIT
    )
    assert err is not None and (err.status, err.code) == (503, "service_unavailable")
