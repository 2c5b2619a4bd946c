"""A request that got no answer at all is sent once more: llama.cpp's server closes idle
keep-alive connections, and the next request on a pooled one failed with "Server
disconnected without sending a response" (the real-model benchmark's warm-up lost a
loop to it). Once, not forever: a server that is down stays a clear error."""

from __future__ import annotations

from typing import Any

import httpx
from openai import APIConnectionError, AsyncOpenAI

from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.worker.chat_backend import ChatStream
from turnpike.worker.openai_compatible import OpenAICompatibleBackend

CHUNKS: list[dict[str, Any]] = [
    {"choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
]


class Stream:
    def __init__(self) -> None:
        self._chunks = iter(CHUNKS)

    def __aiter__(self) -> Stream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            return next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None

    async def close(self) -> None:
        pass


class Flaky(OpenAICompatibleBackend):
    """Fails to get an answer ``failures`` times, then streams."""

    def __init__(self, failures: int) -> None:
        super().__init__("w", AsyncOpenAI(api_key="x", base_url="http://127.0.0.1:9"))
        self.failures, self.calls = failures, 0

    async def open_stream(self, params: dict[str, Any]) -> ChatStream:
        self.calls += 1
        if self.calls <= self.failures:
            request = httpx.Request("POST", "http://127.0.0.1:9/v1/chat/completions")
            raise APIConnectionError(request=request)  # type: ignore[arg-type]
        return Stream()  # type: ignore[return-value]


def request() -> pb.GenerateRequest:
    item = cv.Item(kind=cv.Item.MESSAGE, role="user", text="Say hi.")
    return pb.GenerateRequest(model="m", items=[item], request_id="r")


async def events(backend: Flaky) -> list[pb.GenerateEvent]:
    return [event async for event in backend.generate(request())]


async def test_no_answer_once_is_sent_again_and_answered() -> None:
    backend = Flaky(failures=1)
    got = await events(backend)
    assert backend.calls == 2
    assert got[-1].HasField("finished") and not any(e.HasField("error") for e in got)


async def test_no_answer_twice_is_a_clear_error() -> None:
    backend = Flaky(failures=2)
    got = await events(backend)
    assert backend.calls == 2
    assert got[-1].error.code == "backend_unavailable"
