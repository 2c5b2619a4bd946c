"""A required call asked as JSON, for a model whose chat template makes no tool calls (a
base model: ``TURNPIKE_OPENAI_COMPAT_CALLS_AS_JSON``). Pure: no I/O.

When ``tool_choice`` requires a call (``required``, or one function by name), the
request goes out without tools and with a ``json_schema`` response format whose instances
are exactly the calls allowed: ``{"name": <a tool's name>, "arguments": <its
parameters>}``, one branch per tool. The server constrains decoding to that schema with a
grammar (llama.cpp, vLLM and SGLang all do), so the model writes one valid call. The
stream's text is passed on as a streamed call (``CallChunks``): the name once written,
then the arguments' text, so the rest of the mapping sees a call as any server sends it.

What that costs: the model sees the tools only through the grammar (their descriptions
are not rendered), and one call per response.
"""

from __future__ import annotations

import json
import re
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


# What the grammar makes the model write first: the schema's properties come in order.
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"([^"\\]*)"\s*,\s*"arguments"\s*:\s*')
# What may still be the end of the outer object, so is not passed on until more comes.
_TAIL = re.compile(r"[\s}]*\Z")


class CallChunks:
    """Chunks of the JSON answer in, chunks of one tool call out, as a server streams a
    call: once the name is written, a fragment with the call's id and name, then the
    ``arguments`` object's text as it comes (the outer object's closing brace, which may
    be any trailing ``}``, is held until more text shows it is not the end). The
    finishing chunk says ``tool_calls``. A stream cut by the token limit keeps its
    ``length``; text that is not one of the allowed calls is a protocol error."""

    def __init__(self, tools: Sequence[cv.Tool]) -> None:
        self.names = {t.name for t in tools}
        self._text = ""
        self._sent = 0  # characters of the text passed on as arguments
        self._start: int | None = None  # where the arguments begin, once the head is read

    def feed(self, chunk: dict[str, Any]) -> dict[str, Any]:
        choices = []
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            self._text += delta.get("content") or ""
            reason = choice.get("finish_reason")
            fragment = self._fragment(final=reason is not None and reason != "length")
            out: dict[str, Any] = {"index": 0, "delta": {}, "finish_reason": None}
            if fragment is not None:
                out["delta"] = {"tool_calls": [fragment]}
            if reason == "length":
                out["finish_reason"] = "length"
            elif reason is not None:
                self._check()
                out["finish_reason"] = "tool_calls"
            if out["delta"] or out["finish_reason"]:
                choices.append(out)
        return {**chunk, "choices": choices}

    def _fragment(self, final: bool) -> dict[str, Any] | None:
        head: dict[str, Any] = {}
        if self._start is None:
            match = _HEAD.match(self._text)
            if match is None:
                if final:
                    raise StreamProtocolError("the server's JSON is not one of the calls allowed")
                return None
            if match.group(1) not in self.names:
                raise StreamProtocolError("the server's JSON calls a tool not offered")
            self._start = self._sent = match.end()
            head = {"id": ids.new_id("call"), "type": "function"}
            head["function"] = {"name": match.group(1), "arguments": ""}
        if final:  # the outer object's brace (and white space) is the text's end
            end = self._text.rstrip().removesuffix("}").rstrip()
            end_at = len(end)
        else:
            tail = _TAIL.search(self._text, self._sent)
            end_at = tail.start() if tail else len(self._text)
        piece = self._text[self._sent : end_at] if end_at > self._sent else ""
        self._sent = max(self._sent, end_at)
        if not head and not piece:
            return None
        function = head.get("function", {})
        function["arguments"] = piece
        return {"index": 0, **head, "function": function}

    def _check(self) -> None:
        try:
            answer = json.loads(self._text)
        except json.JSONDecodeError:
            raise StreamProtocolError("the server's call is not JSON") from None
        if not isinstance(answer, dict) or not isinstance(answer.get("arguments"), dict):
            raise StreamProtocolError("the server's JSON is not one of the calls allowed")
