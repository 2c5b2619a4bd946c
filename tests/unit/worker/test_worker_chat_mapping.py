"""The pure mapping between the Inference contract and a chat completions API: requests
out, streamed chunks back (``turnpike.worker.chat_request``, ``turnpike.worker.chat_stream``), and the retry-after headers."""

from __future__ import annotations

import json

import pytest
from support.inference_items import LOOKUP, call, kinds, message, output, request
from support.tools import WEATHER_PROTO_TOOL, WEATHER_SCHEMA

from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.worker.chat_backend import parse_retry_after
from turnpike.worker.chat_request import MappingError, chat_messages, chat_params
from turnpike.worker.chat_stream import ChunkMapper, StreamProtocolError

# ---- the request mapping (pure) -------------------------------------------------------


def test_messages_keep_roles_with_instructions_first_and_developer_as_system() -> None:
    image = cv.Image(url="data:image/png;base64,iVBORw0KGgo=", detail="low")
    messages = chat_messages(
        "Be brief.",
        [
            message("developer", "Answer in French."),
            message("system", "You are a weather bot."),
            message("user", "What is this?", images=[image]),
            message("assistant", "Une carte."),
        ],
    )
    assert messages == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Answer in French."},
        {"role": "system", "content": "You are a weather bot."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": image.url, "detail": "low"}},
            ],
        },
        {"role": "assistant", "content": "Une carte."},
    ]


def test_function_calls_become_one_assistant_message_and_outputs_tool_messages() -> None:
    messages = chat_messages(
        "",
        [
            message("user", "Weather in Paris and Rome?"),
            call("call_1", "get_weather", '{"city": "Paris", "unit": "c"}'),
            call("call_2", "get_weather", '{"city": "Rome", "unit": "c"}'),
            output("call_1", "18 C"),
            output("call_2", "24 C"),
            message("assistant", "Let me look that up."),
            call("call_3", "lookup", "{}"),
            output("call_3", "nothing"),
        ],
    )
    assert messages == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city": "Paris", "unit": "c"}',
                    },
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "arguments": '{"city": "Rome", "unit": "c"}',
                    },
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "24 C"},
        # The model's text and the call it made in the same turn: one message.
        {
            "role": "assistant",
            "content": "Let me look that up.",
            "tool_calls": [
                {
                    "id": "call_3",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_3", "content": "nothing"},
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("", None),
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ("lookup", {"type": "function", "function": {"name": "lookup"}}),
    ],
)
def test_tools_tool_choice_and_sampling(choice, expected) -> None:
    params = chat_params(
        request(
            tools=[WEATHER_PROTO_TOOL, LOOKUP],
            tool_choice=choice,
            parallel_tool_calls=False,
            sampling=pb.SamplingParams(temperature=0.7, top_p=0.9, seed=42, max_output_tokens=128),
        )
    )
    assert params["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather for a city",
                "parameters": WEATHER_SCHEMA,
                "strict": True,
            },
        },
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
    ]
    assert params.get("tool_choice") == expected
    assert params["parallel_tool_calls"] is False
    assert (params["temperature"], params["top_p"], params["seed"]) == (0.7, 0.9, 42)
    assert params["max_completion_tokens"] == 128


def test_unset_sampling_and_no_tools_send_nothing_extra() -> None:
    params = chat_params(request(tool_choice="auto"))
    assert set(params) == {"model", "messages", "temperature"}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tools": [WEATHER_PROTO_TOOL], "tool_choice": "nope"}, "not among the tools"),
        ({"tools": [cv.Tool(name="t", parameters_json="{oops")]}, "parameters are not JSON"),
        (
            {"items": [message("user", "look", images=[cv.Image(file_id="file_1")])]},
            "file_id",
        ),
        ({"items": [output("", "x")]}, "needs call_id"),
        ({"items": [message("critic", "x")]}, "unsupported message role"),
        ({"items": []}, "no messages"),
    ],
)
def test_requests_that_cannot_be_mapped(kwargs, match) -> None:
    with pytest.raises(MappingError, match=match):
        chat_params(request(**kwargs))


# ---- the chunk mapping (pure) ---------------------------------------------------------


def chunk(delta=None, finish_reason=None, **extra) -> dict:
    choice = {"index": 0, "delta": delta or {}}
    if finish_reason:
        choice["finish_reason"] = finish_reason
    return {"choices": [choice], **extra}


def test_chunk_mapper_counts_token_ids_and_closes_items_between_kinds() -> None:
    mapper = ChunkMapper(fallback_input_tokens=40)
    events = mapper.feed(chunk({"role": "assistant"}))
    events += mapper.feed(chunk({"content": "Hi", "tokens": [1, 2]}))
    events += mapper.feed(
        chunk({"tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]})
    )
    events += mapper.feed(chunk({}, "stop"))
    closing, reason, usage = mapper.finish()
    events += closing
    assert kinds(events) == [
        "item_started",
        "delta",
        "item_done",
        "item_started",
        "delta",
        "item_done",
    ]
    assert events[1].delta.tokens == 2 and events[4].delta.tokens == 1
    assert reason == "tool_calls"  # "stop" after a function call
    # No usage from the backend: the rendered prompt and the delta tokens stand in.
    assert (usage.input_tokens, usage.cached_tokens, usage.output_tokens) == (40, 0, 3)


def test_chunk_mapper_protocol_errors() -> None:
    interleaved = ChunkMapper()
    interleaved.feed(chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]}))
    interleaved.feed(chunk({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g"}}]}))
    with pytest.raises(StreamProtocolError, match="continued"):
        interleaved.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}))

    nameless = ChunkMapper()
    with pytest.raises(StreamProtocolError, match="without a function name"):
        nameless.feed(chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}))

    unfinished = ChunkMapper()
    unfinished.feed(chunk({"content": "x"}))
    with pytest.raises(StreamProtocolError, match="without a finish reason"):
        unfinished.finish()
    assert kinds(unfinished.abort()) == ["item_done"]
    assert unfinished.abort() == []


def test_content_filter_ends_as_stop() -> None:
    mapper = ChunkMapper()
    mapper.feed(chunk({"content": "x"}, "content_filter"))
    assert mapper.finish()[1] == "stop"


def test_retry_after_headers() -> None:
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    date = "Wed, 21 Oct 2015 07:28:10 GMT"
    assert parse_retry_after({"retry-after": date}, now=lambda: 1445412480.0) == 10.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_reasoning_deltas_become_a_reasoning_item_before_the_message() -> None:
    mapper = ChunkMapper(fallback_input_tokens=10)
    events = mapper.feed(chunk({"role": "assistant"}))
    events += mapper.feed(chunk({"reasoning": "Think", "tokens": [1]}))
    events += mapper.feed(chunk({"reasoning": " more.", "tokens": [2, 3]}))
    events += mapper.feed(chunk({"content": "Answer.", "tokens": [4, 5]}))
    events += mapper.feed(chunk({}, "stop"))
    closing, reason, usage = mapper.finish()
    events += closing
    started = [e.item_started.kind for e in events if e.HasField("item_started")]
    assert started == [pb.ItemStarted.REASONING, pb.ItemStarted.MESSAGE]
    assert kinds(events) == [
        *("item_started", "delta", "delta", "item_done"),
        *("item_started", "delta", "item_done"),
    ]
    assert "".join(e.delta.text for e in events[1:3]) == "Think more."
    assert reason == "stop"
    assert (usage.output_tokens, usage.reasoning_tokens) == (5, 3)
    # The backend's own count wins when it sends one.
    mapper = ChunkMapper()
    mapper.feed(chunk({"reasoning_content": "Hm."}))
    mapper.feed(
        chunk(
            {},
            "stop",
            usage={
                "prompt_tokens": 7,
                "completion_tokens": 9,
                "completion_tokens_details": {"reasoning_tokens": 6},
            },
        )
    )
    usage = mapper.finish()[2]
    assert (usage.output_tokens, usage.reasoning_tokens) == (9, 6)


def test_reasoning_effort_is_passed_in_the_chat_api_values() -> None:
    for effort, sent in (("", None), ("none", None), ("minimal", "low"), ("high", "high")):
        req = request()
        req.reasoning_effort = effort
        assert chat_params(req).get("reasoning_effort") == sent


# ---- custom tools, offered as a one-string function ------------------------------------

PATCH_TOOL = cv.Tool(
    name="apply_patch",
    description="Edit files.",
    custom=True,
    format_json='{"definition": "start: \\"ok\\"", "syntax": "lark", "type": "grammar"}',
)


def test_a_custom_tool_is_offered_as_a_function_of_one_input_string() -> None:
    history = [
        message("user", "Patch it."),
        cv.Item(
            kind=cv.Item.FUNCTION_CALL,
            custom=True,
            call_id="c1",
            name="apply_patch",
            arguments="ok",
        ),
        cv.Item(kind=cv.Item.FUNCTION_CALL_OUTPUT, custom=True, call_id="c1", text="done"),
    ]
    params = chat_params(request(items=history, tools=[PATCH_TOOL]))
    [tool] = params["tools"]
    assert tool["function"]["name"] == "apply_patch"
    parameters = tool["function"]["parameters"]
    assert parameters["required"] == ["input"]
    assert 'start: "ok"' in parameters["properties"]["input"]["description"]
    sent_call = params["messages"][1]["tool_calls"][0]["function"]
    assert json.loads(sent_call["arguments"]) == {"input": "ok"}
    assert params["messages"][2] == {"role": "tool", "tool_call_id": "c1", "content": "done"}


@pytest.mark.parametrize(
    ("fragments", "given"),
    [
        (['{"inp', 'ut": "*** Begin', ' Patch\\n"}'], "*** Begin Patch\n"),
        (["not json"], "not json"),  # a model that ignored the wrapper: given as it came
    ],
)
def test_a_custom_call_is_held_then_given_as_its_input(fragments, given) -> None:
    mapper = ChunkMapper(custom_tool_names=frozenset({"apply_patch"}))
    first = {"id": "c1", "function": {"name": "apply_patch", "arguments": fragments[0]}}
    events = mapper.feed(chunk({"tool_calls": [first]}))
    for fragment in fragments[1:]:
        events += mapper.feed(chunk({"tool_calls": [{"function": {"arguments": fragment}}]}))
    assert kinds(events) == ["item_started"] and events[0].item_started.custom
    events += mapper.feed(chunk({}, "tool_calls"))
    closing, reason, usage = mapper.finish()
    events += closing
    assert kinds(events) == ["item_started", "delta", "item_done"]
    assert events[1].delta.text == given and reason == "tool_calls"
    assert events[1].delta.tokens == len(fragments) == usage.output_tokens
