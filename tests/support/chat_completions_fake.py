"""A local stand-in for a chat completions API, for the worker's chat backends: Cerebras'
API (``flavour="cerebras"``, for the Cerebras SDK, whose base URL is ``base_url``) or an
OpenAI-compatible server as vLLM runs it (``flavour="vllm"``, for the ``openai`` SDK,
whose base URL is ``base_url + "/v1"``).

Both speak the same streaming wire format (``POST /v1/chat/completions``):

- ``text/event-stream``; one ``data: <chat.completion.chunk JSON>`` event per chunk,
  each ended by a blank line; the last event ``data: [DONE]``;
- chunk: ``id``, ``object: "chat.completion.chunk"``, ``created``, ``model``,
  ``system_fingerprint``, ``choices: [{index: 0, delta: {...}, finish_reason?}]``; the
  first delta is ``{"role": "assistant"}``; then a chunk with ``finish_reason`` and an
  empty delta; ``usage`` (``prompt_tokens``, ``completion_tokens``, ``total_tokens``,
  ``prompt_tokens_details.cached_tokens``);
- tool calls in ``delta.tool_calls[]``: ``index``, ``id``, ``type: "function"``,
  ``function: {name, arguments}`` on an index's first fragment, later fragments only
  ``index`` and ``function.arguments``;
- 429s may carry ``retry-after`` / ``retry-after-ms``.

Where the two differ:

- Cerebras puts ``usage`` on the finishing chunk, with its ``time_info`` (``queue_time``,
  ``prompt_time``, ``completion_time``, ``total_time`` in seconds, and ``created``);
  vLLM sends ``usage`` in a last chunk of its own with ``choices: []``, and no timings;
- an in-stream failure: Cerebras sends ``data: {"error": {message, type, code},
  "status_code": N}`` (its SDK raises the status error for N); vLLM sends ``data:
  {"error": {message, type, param, code: N}}`` (the ``openai`` SDK raises an
  ``APIError``); the stream ends there;
- HTTP error bodies: Cerebras' are ``{message, type, param, code}``; vLLM wraps them
  as ``{"error": {message, type, param, code: N}}``.

The scenario is the request's ``model`` (see ``SCENARIOS``). Requests are checked
against ``api_key`` (``Authorization: Bearer <key>``; 401 otherwise, quoting the key
presented with ``quote_wrong_key``; None checks nothing) and recorded in
``requests`` so tests can assert what the adapter sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

CEREBRAS = "cerebras"
VLLM = "vllm"

TEXT = ["Hello", ", world", "!"]
REASONING = ["The user greets", " us; greet back."]  # model "fake-reasoning", before TEXT
CALL_ID = "9f1c2e7a4"
CALL_NAME = "get_weather"
CALL_ARGUMENT_FRAGMENTS = ['{"city":', ' "Paris",', ' "unit": "c"}']
CALL_ARGUMENTS = "".join(CALL_ARGUMENT_FRAGMENTS)
PARALLEL_CALLS = [
    ("a81f3c0d2", "add", '{"a": 2, "b": 3}'),
    ("b249e0b3f", "multiply", '{"a": 2, "b": 3}'),
]
USAGE: dict[str, Any] = {
    "prompt_tokens": 277,
    "completion_tokens": 25,
    "total_tokens": 302,
    "prompt_tokens_details": {"cached_tokens": 256},
}
TIME_INFO = {
    "queue_time": 0.000412,
    "prompt_time": 0.003125,
    "completion_time": 0.015625,
    "total_time": 0.0205,
}
STREAM_ERROR_MESSAGE = "The model is overloaded; the stream was interrupted."

SCENARIOS = (
    "fake-text",  # three content chunks, finish "stop"
    "fake-tool-call",  # one call, arguments in three fragments, finish "tool_calls"
    "fake-parallel-tool-calls",  # two whole calls in one chunk (as Cerebras sends them)
    "fake-text-then-tool-call",  # content, then a call
    "fake-reasoning",  # two delta.reasoning chunks (gpt-oss on Cerebras), then the text
    "fake-length",  # content, finish "length"
    "fake-no-usage",  # content, finish "stop", no usage / time_info
    "fake-rate-limited-then-ok",  # 429 for the first `rate_limit_failures` calls, then text
    "fake-rate-limited",  # 429 always
    "fake-stream-rate-limited",  # an in-stream 429 error event before any output
    "fake-bad-request",  # 400
    "fake-server-error",  # 500
    "fake-stream-error",  # content, then an in-stream error event
    "fake-broken-stream",  # content, then the connection drops
    "fake-unfinished",  # content, then the body ends without a finish reason or [DONE]
    "fake-slow",  # content, then keep-alive comments until the client goes away
)


class _DropConnection(Exception):
    """Raised inside a response stream: the server aborts the connection mid-body."""


class _QuietDrops(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], _DropConnection))


@dataclass
class RecordedRequest:
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class ChatCompletionsFake:
    api_key: str | None = "test"  # None: no key asked (a server started without one)
    flavour: str = CEREBRAS
    requests: list[RecordedRequest] = field(default_factory=list)
    disconnects: list[str] = field(default_factory=list)  # streams the client cut
    rate_limit_failures: int = 1
    rate_limit_headers: dict[str, str] = field(default_factory=lambda: {"retry-after-ms": "200"})
    attempts: Counter = field(default_factory=Counter)
    # A wrong key's 401 quotes the key presented, as some servers do.
    quote_wrong_key: bool = False

    def __post_init__(self) -> None:
        self.disconnected = threading.Event()  # set with each entry of `disconnects`
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""

    # ---- lifecycle ----

    def start(self) -> ChatCompletionsFake:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{port}"
        app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        logging.getLogger("uvicorn.error").addFilter(_QuietDrops())
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the chat completions fake did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)

    def reset(self) -> None:
        self.requests.clear()
        self.disconnects.clear()
        self.disconnected.clear()
        self.attempts.clear()
        self.rate_limit_failures = 1
        self.rate_limit_headers = {"retry-after-ms": "200"}

    def __enter__(self) -> ChatCompletionsFake:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- the API ----

    async def _chat(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(RecordedRequest(body=body, headers=dict(request.headers)))
        if self.api_key is not None and (
            request.headers.get("authorization") != f"Bearer {self.api_key}"
        ):
            presented = request.headers.get("authorization", "").removeprefix("Bearer ")
            message = (
                f"Incorrect API key provided: {presented}."
                if self.quote_wrong_key
                else "Wrong API Key"
            )
            return self._api_error(401, message, "invalid_request_error", "wrong_api_key")
        model = body.get("model", "")
        self.attempts[model] += 1
        if model == "fake-rate-limited" or (
            model == "fake-rate-limited-then-ok"
            and self.attempts[model] <= self.rate_limit_failures
        ):
            return self._api_error(
                429,
                "Requests per minute limit exceeded - too many requests sent.",
                "too_many_requests_error",
                "request_quota_exceeded",
                headers=self.rate_limit_headers,
            )
        if model == "fake-bad-request":
            return self._api_error(
                400,
                "Tool 'get_weather' has an invalid parameters schema.",
                "invalid_request_error",
                "wrong_api_format",
            )
        if model == "fake-server-error":
            return self._api_error(500, "Internal server error", "server_error", "internal_error")
        if body.get("stream") is not True:
            return self._api_error(400, "this fake only streams", "invalid_request_error", "bad")
        return StreamingResponse(
            self._events(model, request), media_type="text/event-stream; charset=utf-8"
        )

    async def _events(self, model: str, request: Request):
        chunks = _Chunks(model)
        yield chunks.frame({"role": "assistant"})
        if model == "fake-stream-rate-limited":
            yield self._stream_error(
                429, "Too many requests in flight.", "too_many_requests_error", "queue_exceeded"
            )
            return
        if model == "fake-tool-call":
            for frame in chunks.tool_call_frames():
                yield frame
        elif model == "fake-parallel-tool-calls":
            calls = [
                {
                    "function": {"name": name, "arguments": arguments},
                    "type": "function",
                    "id": call_id,
                    "index": index,
                }
                for index, (call_id, name, arguments) in enumerate(PARALLEL_CALLS)
            ]
            yield chunks.frame({"tool_calls": calls})
        else:
            if model == "fake-reasoning":
                for text in REASONING:
                    yield chunks.frame({"reasoning": text})
            for text in TEXT:
                yield chunks.frame({"content": text})
            if model == "fake-text-then-tool-call":
                for frame in chunks.tool_call_frames():
                    yield frame
        if model == "fake-stream-error":
            yield self._stream_error(
                500, STREAM_ERROR_MESSAGE, "server_error", "stream_interrupted"
            )
            return
        if model == "fake-broken-stream":
            raise _DropConnection
        if model == "fake-unfinished":
            return
        if model == "fake-slow":
            completed = False
            try:
                for _ in range(1500):  # up to 30 s
                    await asyncio.sleep(0.02)
                    if await request.is_disconnected():
                        return
                    yield ": keep-alive\n\n"
                completed = True
            finally:
                if not completed:
                    self.disconnects.append(model)
                    self.disconnected.set()
            return
        reason = {
            "fake-length": "length",
            "fake-tool-call": "tool_calls",
            "fake-parallel-tool-calls": "tool_calls",
            "fake-text-then-tool-call": "tool_calls",
        }.get(model, "stop")
        yield chunks.frame({})
        if model == "fake-no-usage":
            yield chunks.frame({}, finish_reason=reason)
        elif self.flavour == CEREBRAS:
            yield chunks.frame({}, finish_reason=reason, usage=USAGE, time_info=TIME_INFO)
        else:
            yield chunks.frame({}, finish_reason=reason)
            yield chunks.usage_frame(USAGE)
        yield "data: [DONE]\n\n"

    def _error_object(self, status: int, message: str, type_: str, code: str) -> dict[str, Any]:
        # vLLM's error code is the HTTP status; Cerebras' is a name.
        return {
            "message": message,
            "type": type_,
            "param": "",
            "code": code if self.flavour == CEREBRAS else status,
        }

    def _api_error(
        self,
        status: int,
        message: str,
        type_: str,
        code: str,
        headers: dict[str, str] | None = None,
    ) -> JSONResponse:
        error = self._error_object(status, message, type_, code)
        return JSONResponse(
            error if self.flavour == CEREBRAS else {"error": error},
            status_code=status,
            headers=headers,
        )

    def _stream_error(self, status: int, message: str, type_: str, code: str) -> str:
        error = self._error_object(status, message, type_, code)
        if self.flavour == CEREBRAS:
            del error["param"]
            return _data({"error": error, "status_code": status})
        return _data({"error": error})


class _Chunks:
    def __init__(self, model: str) -> None:
        self.model = model
        self.id = f"chatcmpl-{time.monotonic_ns():x}"
        self.created = int(time.time())

    def frame(self, delta: dict[str, Any], finish_reason: str | None = None, **extra) -> str:
        choice: dict[str, Any] = {"delta": delta, "index": 0}
        if finish_reason is not None:
            choice["finish_reason"] = finish_reason
        chunk = {
            "id": self.id,
            "choices": [choice],
            "created": self.created,
            "model": self.model,
            "system_fingerprint": "fp_fake",
            "object": "chat.completion.chunk",
            **extra,
        }
        if "time_info" in chunk:
            chunk["time_info"] = {**chunk["time_info"], "created": time.time()}
        return _data(chunk)

    def usage_frame(self, usage: dict[str, Any]) -> str:
        """vLLM's last chunk with ``include_usage``: no choices, only the usage."""
        return _data(
            {
                "id": self.id,
                "choices": [],
                "created": self.created,
                "model": self.model,
                "object": "chat.completion.chunk",
                "usage": usage,
            }
        )

    def tool_call_frames(self) -> list[str]:
        first, *rest = CALL_ARGUMENT_FRAGMENTS
        frames = [
            self.frame(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": CALL_ID,
                            "type": "function",
                            "function": {"name": CALL_NAME, "arguments": first},
                        }
                    ]
                }
            )
        ]
        frames += [
            self.frame({"tool_calls": [{"index": 0, "function": {"arguments": fragment}}]})
            for fragment in rest
        ]
        return frames


def _data(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"
