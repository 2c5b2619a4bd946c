"""The worker's chat completions backends, Cerebras and OpenAI-compatible: each adapter
against a local fake of its API (``support.chat_completions_fake``, in Cerebras' flavour or
vLLM's), their configuration, and a real worker process serving requests for each. The
pure mapping is tested in ``test_worker_chat_mapping``."""

from __future__ import annotations

import asyncio
import functools
import json
import signal
import time
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from cerebras.cloud.sdk import AsyncCerebras
from openai import AsyncOpenAI
from support import chat_completions_fake as fakeapi
from support.chat_completions_fake import ChatCompletionsFake
from support.inference_items import LOOKUP, call, kinds, message, output, request, text_of
from support.procs import free_port
from support.tools import WEATHER_PROTO_TOOL, WEATHER_SCHEMA

from turnpike import token_bytes
from turnpike.backend_names import CEREBRAS, OPENAI_COMPATIBLE
from turnpike.config import WorkerSettings
from turnpike.grpc_client import wait_healthy
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.inference.v1 import inference_pb2_grpc
from turnpike.worker.backends import InvalidRequestError
from turnpike.worker.cerebras import CerebrasBackend
from turnpike.worker.chat_backend import ChatBackend
from turnpike.worker.openai_compatible import OpenAICompatibleBackend
from turnpike.worker.server import SERVICE_NAME

# ---- the adapters against the fake ---------------------------------------------------

FLAVOURS = {CEREBRAS: fakeapi.CEREBRAS, OPENAI_COMPATIBLE: fakeapi.VLLM}
WORKER_ID = "worker-chat"


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, ChatCompletionsFake]]:
    with (
        ChatCompletionsFake(flavour=fakeapi.CEREBRAS) as cerebras,
        ChatCompletionsFake(flavour=fakeapi.VLLM) as vllm,
    ):
        yield {CEREBRAS: cerebras, OPENAI_COMPATIBLE: vllm}


@pytest.fixture(params=list(FLAVOURS))
def backend_name(request) -> str:
    """Every adapter test runs against both backends, each with its own API's fake."""
    return request.param


@pytest.fixture
def fake(servers: dict[str, ChatCompletionsFake], backend_name: str) -> ChatCompletionsFake:
    servers[backend_name].reset()
    return servers[backend_name]


@pytest.fixture
async def make_backend(fake: ChatCompletionsFake, backend_name: str) -> AsyncIterator:
    made: list[ChatBackend] = []

    def make(*, api_key: str = "test", base_url: str | None = None, **kwargs) -> ChatBackend:
        base_url = base_url or fake.base_url
        kwargs.setdefault("max_retry_delay_s", 2.0)
        if backend_name == CEREBRAS:
            cerebras = AsyncCerebras(
                api_key=api_key,
                base_url=base_url,
                max_retries=0,
                timeout=5.0,
                warm_tcp_connection=False,
            )
            made.append(CerebrasBackend(WORKER_ID, cerebras, **kwargs))
        else:
            client = AsyncOpenAI(
                api_key=api_key, base_url=f"{base_url}/v1", max_retries=0, timeout=5.0
            )
            made.append(OpenAICompatibleBackend(WORKER_ID, client, **kwargs))
        return made[-1]

    yield make
    for backend in made:
        await backend.aclose()


async def run(backend: ChatBackend, req: pb.GenerateRequest) -> list[pb.GenerateEvent]:
    return [event async for event in backend.generate(req)]


async def test_text_stream_usage_and_timings(fake, make_backend) -> None:
    started = time.monotonic()
    events = await run(make_backend(), request("fake-text", instructions="Be brief."))
    elapsed_ms = (time.monotonic() - started) * 1000
    assert kinds(events) == ["item_started", "delta", "delta", "delta", "item_done", "finished"]
    assert events[0].item_started.kind == pb.ItemStarted.MESSAGE
    assert text_of(events) == "".join(fakeapi.TEXT)
    assert [e.delta.tokens for e in events if e.HasField("delta")] == [1, 1, 1]

    finished = events[-1].finished
    assert finished.finish_reason == "stop" and finished.worker_id == WORKER_ID
    usage = finished.usage
    assert usage.input_tokens == fakeapi.USAGE["prompt_tokens"]
    assert usage.cached_tokens == fakeapi.USAGE["prompt_tokens_details"]["cached_tokens"]
    assert usage.output_tokens == fakeapi.USAGE["completion_tokens"]
    t = finished.timings
    assert 0 < t.ttft_ms <= elapsed_ms  # measured here, to the first delta
    if fake.flavour == fakeapi.CEREBRAS:  # Cerebras reports its own: time_info
        info = fakeapi.TIME_INFO
        assert t.queue_ms == pytest.approx(info["queue_time"] * 1000)
        assert t.prefill_ms == pytest.approx(info["prompt_time"] * 1000)
        assert t.decode_ms == pytest.approx(info["completion_time"] * 1000)
        assert t.total_ms == pytest.approx(info["total_time"] * 1000)
    else:  # no timings from the server: ours
        assert (t.queue_ms, t.prefill_ms) == (0, t.ttft_ms)
        assert t.ttft_ms + t.decode_ms <= t.total_ms <= elapsed_ms

    [sent] = fake.requests
    assert sent.headers["authorization"] == "Bearer test"
    assert sent.body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert sent.body["stream"] is True
    assert sent.body["stream_options"] == {"include_usage": True}
    assert "tools" not in sent.body


async def test_streamed_reasoning_becomes_a_reasoning_item(fake, make_backend) -> None:
    events = await run(make_backend(), request("fake-reasoning", reasoning_effort="high"))
    started = [e.item_started.kind for e in events if e.HasField("item_started")]
    assert started == [pb.ItemStarted.REASONING, pb.ItemStarted.MESSAGE]
    reasoning_end = kinds(events).index("item_done")
    assert text_of(events[:reasoning_end]) == "".join(fakeapi.REASONING)
    assert text_of(events[reasoning_end:]) == "".join(fakeapi.TEXT)
    usage = events[-1].finished.usage
    assert usage.output_tokens == fakeapi.USAGE["completion_tokens"]
    assert usage.reasoning_tokens == len(fakeapi.REASONING)  # a token a chunk, as counted
    assert fake.requests[-1].body["reasoning_effort"] == "high"


async def test_streamed_tool_call_becomes_a_function_call_item(fake, make_backend) -> None:
    req = request(
        "fake-tool-call",
        tools=[WEATHER_PROTO_TOOL],
        tool_choice="get_weather",
        parallel_tool_calls=True,
    )
    events = await run(make_backend(), req)
    assert kinds(events) == ["item_started", "delta", "delta", "delta", "item_done", "finished"]
    started = events[0].item_started
    assert started.kind == pb.ItemStarted.FUNCTION_CALL
    assert (started.call_id, started.name) == (fakeapi.CALL_ID, fakeapi.CALL_NAME)
    assert text_of(events) == fakeapi.CALL_ARGUMENTS
    assert json.loads(text_of(events)) == {"city": "Paris", "unit": "c"}
    assert events[-1].finished.finish_reason == "tool_calls"

    body = fake.requests[0].body
    assert body["tools"][0]["function"]["name"] == "get_weather"
    assert body["tools"][0]["function"]["parameters"] == WEATHER_SCHEMA
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["parallel_tool_calls"] is True


async def test_parallel_calls_in_one_chunk_and_text_before_a_call(fake, make_backend) -> None:
    backend = make_backend()
    parallel = request("fake-parallel-tool-calls", tools=[LOOKUP], parallel_tool_calls=True)
    events = await run(backend, parallel)
    started = [e.item_started for e in events if e.HasField("item_started")]
    assert [(s.call_id, s.name) for s in started] == [(c[0], c[1]) for c in fakeapi.PARALLEL_CALLS]
    assert kinds(events).count("item_done") == 2
    assert text_of(events) == "".join(c[2] for c in fakeapi.PARALLEL_CALLS)
    # With parallel calls off, a model that makes two anyway has the second dropped.
    events = await run(backend, request("fake-parallel-tool-calls", tools=[LOOKUP]))
    started = [e.item_started for e in events if e.HasField("item_started")]
    assert [s.call_id for s in started] == [fakeapi.PARALLEL_CALLS[0][0]]
    assert kinds(events).count("item_done") == 1

    events = await run(backend, request("fake-text-then-tool-call", tools=[WEATHER_PROTO_TOOL]))
    assert kinds(events)[:5] == ["item_started", "delta", "delta", "delta", "item_done"]
    assert events[5].item_started.kind == pb.ItemStarted.FUNCTION_CALL
    assert events[-2].HasField("item_done") and events[-1].finished.finish_reason == "tool_calls"


async def test_prior_tool_call_and_output_are_sent_as_tool_calls_and_tool_message(
    fake, make_backend
) -> None:
    items = [
        message("user", "Weather in Paris?"),
        call("call_abc", "get_weather", '{"city": "Paris", "unit": "c"}'),
        output("call_abc", '{"temp": 18}'),
    ]
    events = await run(
        make_backend(), request("fake-text", items=items, tools=[WEATHER_PROTO_TOOL])
    )
    assert events[-1].HasField("finished")
    messages = fake.requests[0].body["messages"]
    assert messages[1] == {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "c"}'},
            }
        ],
    }
    assert messages[2] == {"role": "tool", "tool_call_id": "call_abc", "content": '{"temp": 18}'}


async def test_length_finish_and_missing_usage(fake, make_backend) -> None:
    backend = make_backend()
    events = await run(backend, request("fake-length"))
    assert events[-1].finished.finish_reason == "length"
    events = await run(
        backend, request("fake-no-usage", prompt=token_bytes.pack(range(90)), image_tokens=10)
    )
    usage = events[-1].finished.usage
    assert (usage.input_tokens, usage.output_tokens) == (100, 3)


async def test_rate_limit_is_retried_after_the_requested_delay(fake, make_backend) -> None:
    fake.rate_limit_failures = 2
    fake.rate_limit_headers = {"retry-after-ms": "300"}
    waits: list[float] = []

    async def sleep(seconds: float) -> None:  # the waits, not the clock (a loaded machine)
        waits.append(seconds)

    events = await run(
        make_backend(max_retries=3, sleep=sleep), request("fake-rate-limited-then-ok")
    )
    assert events[-1].HasField("finished")
    assert len(fake.requests) == 3
    assert waits == [0.3, 0.3]  # what the server asked for, not the backoff's 0.5 and 1


async def test_rate_limit_delay_is_capped(fake, make_backend) -> None:
    fake.rate_limit_headers = {"retry-after": "120"}
    started = time.monotonic()
    events = await run(make_backend(max_retry_delay_s=0.2), request("fake-rate-limited-then-ok"))
    assert events[-1].HasField("finished")
    assert 0.2 <= time.monotonic() - started < 1.5


async def test_rate_limited_forever_gives_up_after_max_retries(fake, make_backend) -> None:
    fake.rate_limit_headers = {"retry-after-ms": "20"}
    events = await run(make_backend(max_retries=2), request("fake-rate-limited"))
    assert kinds(events) == ["error"]
    error = events[0].error
    assert error.code == "rate_limited" and error.retryable
    assert "Requests per minute limit exceeded" in error.message
    assert len(fake.requests) == 3  # the first attempt and two retries

    # A 429 sent as an in-stream error before any output is a rate limit too.
    fake.reset()
    events = await run(make_backend(max_retries=1), request("fake-stream-rate-limited"))
    assert kinds(events) == ["error"] and events[0].error.code == "rate_limited"
    assert len(fake.requests) == 2


async def test_wrong_api_key_is_backend_auth_failed(fake, make_backend) -> None:
    events = await run(make_backend(api_key="wrong"), request("fake-text"))
    assert kinds(events) == ["error"]
    error = events[0].error
    assert error.code == "backend_auth_failed" and not error.retryable
    assert "Wrong API Key" in error.message
    assert len(fake.requests) == 1


async def test_a_self_hosted_servers_prefix_cache_is_salted_per_tenant(
    fake, make_backend, backend_name
) -> None:
    """vLLM reuses a cached prefix only for requests with the same cache_salt: each tenant
    gets its own (a hash: the tenant's name does not leave Turnpike). Cerebras takes no
    salt (its cache is per organization), so none is sent there."""
    backend = make_backend()
    for tenant in ("alice", "bob", "alice"):
        await run(backend, request("fake-text", tenant=tenant))
    salts = [sent.body.get("cache_salt") for sent in fake.requests]
    if backend_name == CEREBRAS:
        assert salts == [None, None, None]
        return
    assert salts[0] == salts[2] and salts[0] != salts[1]
    assert all(salts) and not any(t in s for s in salts for t in ("alice", "bob"))
    fake.requests.clear()  # switched off (TURNPIKE_OPENAI_COMPAT_CACHE_SALT=false): none
    await run(make_backend(cache_salt=False), request("fake-text", tenant="alice"))
    assert "cache_salt" not in fake.requests[0].body


async def test_a_401_quoting_the_api_key_reaches_no_one_with_the_key(
    fake, make_backend, caplog
) -> None:
    """The backend's key is a secret: redacted from the message the client, the log and
    the trace get, whatever the server put in it."""
    key = "csk-0123456789-secret-backend-key"
    fake.quote_wrong_key = True
    try:
        events = await run(make_backend(api_key=key), request("fake-text"))
    finally:
        fake.quote_wrong_key = False
    [event] = events
    assert event.error.code == "backend_auth_failed"
    assert key not in event.error.message and "[redacted]" in event.error.message
    assert key not in caplog.text


async def test_client_errors_are_rejected_with_the_backend_message(fake, make_backend) -> None:
    events = await run(make_backend(), request("fake-bad-request"))
    error = events[0].error
    assert kinds(events) == ["error"] and error.code == "backend_rejected"
    assert not error.retryable
    assert "invalid parameters schema" in error.message and "400" in error.message


async def test_server_errors_and_unreachable_backend_are_unavailable(fake, make_backend) -> None:
    events = await run(make_backend(), request("fake-server-error"))
    assert kinds(events) == ["error"]
    assert events[0].error.code == "backend_unavailable" and events[0].error.retryable
    assert len(fake.requests) == 1  # a 5xx is not retried here; the caller may reroute

    closed = f"http://127.0.0.1:{free_port()}"
    events = await run(make_backend(base_url=closed), request("fake-text"))
    assert kinds(events) == ["error"]
    assert events[0].error.code == "backend_unavailable" and events[0].error.retryable


@pytest.mark.parametrize(
    ("model", "detail"),
    [
        ("fake-stream-error", fakeapi.STREAM_ERROR_MESSAGE),
        ("fake-broken-stream", "incomplete chunked read"),
        ("fake-unfinished", "without a finish reason"),
    ],
)
async def test_a_stream_that_breaks_closes_the_item_then_errors(
    fake, make_backend, model, detail
) -> None:
    events = await run(make_backend(), request(model))
    assert kinds(events) == ["item_started", "delta", "delta", "delta", "item_done", "error"]
    error = events[-1].error
    assert error.code == "backend_stream_error" and not error.retryable
    assert detail in error.message


async def test_cancelling_the_caller_closes_the_upstream_stream(fake, make_backend) -> None:
    backend = make_backend()
    first_delta = asyncio.Event()

    async def consume() -> None:
        async for event in backend.generate(request("fake-slow")):
            if event.HasField("delta"):
                first_delta.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(first_delta.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(fake.disconnected.wait, 5)
    assert fake.disconnects == ["fake-slow"]


async def test_a_caller_that_stops_reading_closes_the_upstream_stream(fake, make_backend) -> None:
    events = make_backend().generate(request("fake-slow"))
    async for event in events:
        if event.HasField("delta"):
            break
    await events.aclose()  # what the server does when its caller goes away
    assert await asyncio.to_thread(fake.disconnected.wait, 5)
    assert fake.disconnects == ["fake-slow"]


@pytest.mark.parametrize(
    ("text_format", "sent"),
    [
        (
            pb.TextFormat(
                type="json_schema",
                name="weather",
                schema_json=json.dumps(WEATHER_SCHEMA),
                strict=True,
            ),
            {
                "type": "json_schema",
                "json_schema": {"name": "weather", "schema": WEATHER_SCHEMA, "strict": True},
            },
        ),
        (pb.TextFormat(type="json_object"), {"type": "json_object"}),
    ],
)
async def test_the_text_format_is_sent_as_response_format(
    fake, make_backend, text_format, sent
) -> None:
    events = await run(make_backend(), request("fake-text", text_format=text_format))
    assert events[-1].finished.finish_reason == "stop"
    [upstream] = fake.requests
    assert upstream.body["response_format"] == sent


async def test_unmappable_request_raises_before_any_request(fake, make_backend) -> None:
    with pytest.raises(InvalidRequestError, match="not among the tools"):
        await run(make_backend(), request(tools=[WEATHER_PROTO_TOOL], tool_choice="nope"))
    assert fake.requests == []


async def test_the_servers_model_name_is_sent_and_a_key_is_optional(monkeypatch) -> None:
    with ChatCompletionsFake(api_key=None, flavour=fakeapi.VLLM) as keyless:
        monkeypatch.setenv("TURNPIKE_OPENAI_COMPAT_BASE_URL", f"{keyless.base_url}/v1")
        monkeypatch.setenv("TURNPIKE_OPENAI_COMPAT_API_KEY", "")
        monkeypatch.setenv("TURNPIKE_OPENAI_COMPAT_MODEL", "fake-tool-call")
        backend = OpenAICompatibleBackend.from_settings(WorkerSettings())
        assert backend is not None
        try:
            events = await run(backend, request("self-hosted", tools=[WEATHER_PROTO_TOOL]))
        finally:
            await backend.aclose()
    # The server's name picked the fake's scenario; the router's id went nowhere.
    assert [r.body["model"] for r in keyless.requests] == ["fake-tool-call"]
    assert text_of(events) == fakeapi.CALL_ARGUMENTS
    assert events[-1].finished.finish_reason == "tool_calls"


# ---- configuration ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "switch", "prefix"),
    [
        (CerebrasBackend, {"CEREBRAS_API_KEY": "k"}, "TURNPIKE_CEREBRAS"),
        (
            OpenAICompatibleBackend,
            {"TURNPIKE_OPENAI_COMPAT_BASE_URL": "http://127.0.0.1:9/v1"},
            "TURNPIKE_OPENAI_COMPAT",
        ),
    ],
)
def test_settings_make_a_backend_only_when_switched_on(monkeypatch, cls, switch, prefix) -> None:
    for name in switch:
        monkeypatch.delenv(name, raising=False)
    assert cls.from_settings(WorkerSettings()) is None
    for name, value in switch.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CEREBRAS_BASE_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("TURNPIKE_OPENAI_COMPAT_API_KEY", "k")
    monkeypatch.setenv(f"{prefix}_MAX_RETRIES", "5")
    settings = WorkerSettings()
    assert "'k'" not in repr(settings)  # keys stay out of logs
    backend = cls.from_settings(settings)
    assert backend is not None and backend.max_retries == 5
    monkeypatch.setenv(f"{prefix}_TIMEOUT_S", "0")
    with pytest.raises(ValueError, match=f"{prefix}_TIMEOUT_S"):
        cls.from_settings(WorkerSettings())


# ---- a real worker process ------------------------------------------------------------


@pytest.fixture
def start_worker(start_worker):
    return functools.partial(
        start_worker, TURNPIKE_WORKER_ID="worker-chat-proc", TURNPIKE_SHUTDOWN_GRACE_S="2"
    )


async def generate(address: str, req: pb.GenerateRequest) -> list[pb.GenerateEvent]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = inference_pb2_grpc.InferenceStub(channel)
        return [e async for e in stub.Generate(req, timeout=10)]


async def test_worker_process_serves_both_chat_backends(servers, start_worker) -> None:
    cerebras, vllm = servers[CEREBRAS], servers[OPENAI_COMPATIBLE]
    cerebras.reset()
    vllm.reset()
    proc, address = start_worker(
        CEREBRAS_API_KEY="test",
        CEREBRAS_BASE_URL=cerebras.base_url,
        TURNPIKE_OPENAI_COMPAT_BASE_URL=f"{vllm.base_url}/v1",
        TURNPIKE_OPENAI_COMPAT_API_KEY="test",
        TURNPIKE_OPENAI_COMPAT_MODEL="fake-text",
    )
    assert await wait_healthy(address, timeout=30, service=SERVICE_NAME)

    events = await generate(
        address, request("fake-tool-call", tools=[WEATHER_PROTO_TOOL], backend=CEREBRAS)
    )
    started = events[0].item_started
    assert (started.call_id, started.name) == (fakeapi.CALL_ID, fakeapi.CALL_NAME)
    assert text_of(events) == fakeapi.CALL_ARGUMENTS
    finished = events[-1].finished
    assert finished.finish_reason == "tool_calls" and finished.worker_id == "worker-chat-proc"
    assert cerebras.requests[0].headers["authorization"] == "Bearer test"

    events = await generate(address, request("self-hosted", backend=OPENAI_COMPATIBLE))
    assert text_of(events) == "".join(fakeapi.TEXT)
    assert events[-1].finished.usage.output_tokens == fakeapi.USAGE["completion_tokens"]
    [sent] = vllm.requests
    assert sent.body["model"] == "fake-text"
    assert sent.headers["authorization"] == "Bearer test"

    # The simulator still serves its requests; an unknown backend is INVALID_ARGUMENT.
    sim = request(
        "turnpike-sim",
        backend="simulator",
        prompt=token_bytes.pack(range(10)),
        tokens_per_second=5000.0,
        prefill_tokens_per_second=100_000.0,
    )
    assert (await generate(address, sim))[-1].HasField("finished")
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await generate(address, request(backend="tpu"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown backend 'tpu'" in info.value.details()

    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 10) == 0


async def test_worker_process_without_configuration_answers_backend_unavailable(
    start_worker,
) -> None:
    proc, address = start_worker(TURNPIKE_OPENAI_COMPAT_BASE_URL="")
    assert await wait_healthy(address, timeout=30, service=SERVICE_NAME)
    for backend, setting in [
        (CEREBRAS, "CEREBRAS_API_KEY"),
        (OPENAI_COMPATIBLE, "TURNPIKE_OPENAI_COMPAT_BASE_URL"),
    ]:
        events = await generate(address, request("gpt-oss-120b", backend=backend))
        assert kinds(events) == ["error"]
        error = events[0].error
        assert error.code == "backend_unavailable" and not error.retryable
        assert setting in error.message
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 10) == 0
