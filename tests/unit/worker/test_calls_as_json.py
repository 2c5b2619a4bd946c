"""A required call asked as JSON (TURNPIKE_OPENAI_COMPAT_CALLS_AS_JSON): for a model whose
chat template makes no tool calls, as Gemma 3 270M's on llama.cpp's server (it answered
tool_choice "required" in text). The request carries a json_schema of the calls allowed;
the held answer comes back as one tool call."""

from __future__ import annotations

import json

import pytest

from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.worker.calls_as_json import CallChunks, as_json_call, call_schema, required_tools
from turnpike.worker.chat_request import chat_params
from turnpike.worker.chat_stream import ChunkMapper, StreamProtocolError

PARAMS = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
READ = cv.Tool(name="read_file", parameters_json=json.dumps(PARAMS))
LIST = cv.Tool(name="list_dir", parameters_json=json.dumps(PARAMS))


def request(choice: str, *tools: cv.Tool) -> pb.GenerateRequest:
    item = cv.Item(kind=cv.Item.MESSAGE, role="user", text="Read the store.")
    return pb.GenerateRequest(model="m", items=[item], tools=list(tools), tool_choice=choice)


@pytest.mark.parametrize(
    ("choice", "expected"),
    [("required", ["read_file", "list_dir"]), ("list_dir", ["list_dir"]), ("auto", None),
     ("none", None), ("", None)],
)  # fmt: skip
def test_only_a_required_call_is_asked_as_json(choice, expected) -> None:
    tools = required_tools(request(choice, READ, LIST))
    assert (None if tools is None else [t.name for t in tools]) == expected


def test_a_custom_tool_is_never_asked_as_json() -> None:
    custom = cv.Tool(name="shell", custom=True)
    assert required_tools(request("required", READ, custom)) is None


def test_the_request_carries_the_calls_schema_instead_of_tools() -> None:
    req = request("required", READ, LIST)
    params = as_json_call(chat_params(req), list(req.tools))
    assert {"tools", "tool_choice", "parallel_tool_calls"}.isdisjoint(params)
    schema = params["response_format"]["json_schema"]["schema"]
    assert [b["properties"]["name"] for b in schema["anyOf"]] == [
        {"const": "read_file"},
        {"const": "list_dir"},
    ]
    assert schema["anyOf"][0]["properties"]["arguments"] == PARAMS
    assert "anyOf" not in call_schema([READ])  # one tool: its branch alone


def chunk(content: str | None = None, finish: str | None = None, **extra) -> dict:
    delta = {"content": content} if content is not None else {}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def test_the_held_answer_becomes_one_tool_call_for_the_mapper() -> None:
    held, mapper = CallChunks([READ, LIST]), ChunkMapper()
    usage = {"prompt_tokens": 40, "completion_tokens": 12}
    events = []
    for c in [chunk('{"name": "list_'), chunk('dir", "arguments": {"path": "src"}}'),
              chunk(finish="stop"), {"choices": [], "usage": usage}]:  # fmt: skip
        events += mapper.feed(held.feed(c))
    done, reason, totals = mapper.finish()
    events += done
    [started] = [e.item_started for e in events if e.HasField("item_started")]
    assert (started.kind, started.name) == (pb.ItemStarted.FUNCTION_CALL, "list_dir")
    text = "".join(e.delta.text for e in events if e.HasField("delta"))
    assert json.loads(text) == {"path": "src"}
    assert reason == "tool_calls" and totals.output_tokens == 12


def test_an_answer_cut_by_the_token_limit_is_length_and_no_call() -> None:
    held = CallChunks([READ])
    held.feed(chunk('{"name": "read_file", "argum'))
    assert held.feed(chunk(finish="length"))["choices"] == [
        {"index": 0, "delta": {}, "finish_reason": "length"}
    ]


@pytest.mark.parametrize("text", ["not json", '{"name": "rm_rf", "arguments": {}}', "[1]"])
def test_an_answer_that_is_not_an_allowed_call_is_a_protocol_error(text) -> None:
    held = CallChunks([READ])
    with pytest.raises(StreamProtocolError):
        held.feed(chunk(text))
        held.feed(chunk(finish="stop"))


def test_the_call_streams_as_it_is_written() -> None:
    """Its name as soon as it is written, its arguments as they come: the gateway hears
    from the worker while a slow model writes (it gives up on a worker silent for 30 s),
    and the closing brace that may end the outer object waits for what follows it."""
    held = CallChunks([READ])
    assert held.feed(chunk('{"name": "read_'))["choices"] == []
    [first] = held.feed(chunk('file", "arguments": {"pa'))["choices"]
    [call] = first["delta"]["tool_calls"]
    assert call["function"] == {"name": "read_file", "arguments": '{"pa'} and call["id"]
    [more] = held.feed(chunk('th": "a"}'))["choices"]
    assert more["delta"]["tool_calls"][0]["function"]["arguments"] == 'th": "a"'
    [last] = held.feed(chunk(" }", finish="stop"))["choices"]
    assert last["delta"]["tool_calls"][0]["function"]["arguments"] == "}"
    assert last["finish_reason"] == "tool_calls"
