"""A required call asked as JSON, for a model whose chat template makes no tool calls (a
base model: ``TURNPIKE_OPENAI_COMPAT_CALLS_AS_JSON``). Pure: no I/O.

When ``tool_choice`` requires a call (``required``, or one function by name), the
request goes out without tools and with a ``json_schema`` response format whose instances
are exactly the calls allowed: ``{"name": <a tool's name>, "arguments": <its
parameters>}``, one branch per tool. The server constrains decoding to that schema with a
grammar (llama.cpp, vLLM and SGLang all do), so the model writes one valid call. The
stream's text is held (``CallChunks``) and, when it finishes, given back as one
``tool_calls`` chunk, so the rest of the mapping sees a call as any server sends it.

What that costs: the model sees the tools only through the grammar (their descriptions
are not rendered), the call arrives whole at the end (no argument deltas; its first
token is the end of generation), and one call per response.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from turnpike import ids
from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.inference.v1 import inference_pb2 as pb
from turnpike.worker.chat_stream import StreamProtocolError

SCHEMA_NAME = "tool_call"


def required_tools(request: pb.GenerateRequest) -> list[cv.Tool] | None:
    """The tools one of which the request requires a call to; None when it requires none
    (or requires a custom tool, whose input is free text, not JSON)."""
    tools = list(request.tools)
    choice = request.tool_choice
    if not tools or choice in ("", "auto", "none"):
        return None
    if choice != "required":
        tools = [t for t in tools if t.name == choice]
    if not tools or any(t.custom for t in tools):
        return None
    return tools


def call_schema(tools: Sequence[cv.Tool]) -> dict[str, Any]:
    branches = []
    for tool in tools:
        parameters = json.loads(tool.parameters_json) if tool.parameters_json else {}
        branches.append(
            {
                "type": "object",
                "properties": {
                    "name": {"const": tool.name},
                    "arguments": parameters or {"type": "object"},
                },
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    return branches[0] if len(branches) == 1 else {"anyOf": branches}


def as_json_call(params: dict[str, Any], tools: Sequence[cv.Tool]) -> dict[str, Any]:
    """``chat_params``' output for a call asked as JSON."""
    out = {k: v for k, v in params.items() if k not in ("tools", "tool_choice")}
    out.pop("parallel_tool_calls", None)
    schema = {"name": SCHEMA_NAME, "schema": call_schema(tools), "strict": True}
    out["response_format"] = {"type": "json_schema", "json_schema": schema}
    return out


class CallChunks:
    """Chunks of the JSON answer in, chunks of one tool call out: content is held, and the
    finishing chunk becomes the call (``finish_reason`` ``tool_calls``). A stream cut by
    the token limit keeps its ``length`` and gives no call; text that is not one of the
    allowed calls is a protocol error."""

    def __init__(self, tools: Sequence[cv.Tool]) -> None:
        self.names = {t.name for t in tools}
        self._text: list[str] = []

    def feed(self, chunk: dict[str, Any]) -> dict[str, Any]:
        choices = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if content := delta.get("content"):
                self._text.append(content)
            reason = choice.get("finish_reason")
            if reason is None:
                continue  # held: nothing of it goes on until the finish
            if reason == "length":
                choices.append({"index": 0, "delta": {}, "finish_reason": "length"})
            else:
                choices.append(self._call())
        return {**chunk, "choices": choices}

    def _call(self) -> dict[str, Any]:
        text = "".join(self._text)
        try:
            answer = json.loads(text)
        except json.JSONDecodeError:
            raise StreamProtocolError("the server's call is not JSON") from None
        name = answer.get("name") if isinstance(answer, dict) else None
        arguments = answer.get("arguments") if isinstance(answer, dict) else None
        if name not in self.names or not isinstance(arguments, dict):
            raise StreamProtocolError("the server's JSON is not one of the calls allowed")
        call = {
            "index": 0,
            "id": ids.new_id("call"),
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        return {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": "tool_calls"}
