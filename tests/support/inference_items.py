"""Inference-contract items, requests and event views for the worker's backend tests."""

from __future__ import annotations

from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.inference.v1 import inference_pb2 as pb

LOOKUP = cv.Tool(name="lookup", parameters_json='{"type": "object"}')


def message(role: str, text: str, images=()) -> cv.Item:
    return cv.Item(kind=cv.Item.MESSAGE, role=role, text=text, images=list(images))


def call(call_id: str, name: str, arguments: str) -> cv.Item:
    return cv.Item(kind=cv.Item.FUNCTION_CALL, call_id=call_id, name=name, arguments=arguments)


def output(call_id: str, text: str) -> cv.Item:
    return cv.Item(kind=cv.Item.FUNCTION_CALL_OUTPUT, call_id=call_id, text=text)


def request(model: str = "fake-text", items=None, **kwargs) -> pb.GenerateRequest:
    return pb.GenerateRequest(
        request_id="resp_cerebras",
        model=model,
        items=items if items is not None else [message("user", "Weather in Paris?")],
        **kwargs,
    )


def kinds(events) -> list[str]:
    return [e.WhichOneof("event") for e in events]


def text_of(events) -> str:
    return "".join(e.delta.text for e in events if e.HasField("delta"))
