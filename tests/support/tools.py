"""The tools and small conversation helpers the SDK, tracing and worker tests share."""

from __future__ import annotations

import json
from typing import Any

from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseFunctionToolCall,
    ResponseInputItemParam,
)
from websockets.sync.client import connect as ws_connect

from turnpike.conversation.v1 import conversation_pb2 as cv

WEATHER_TOOL: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "strict": True,
    "parameters": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        },
        "required": ["city", "unit"],
        "additionalProperties": False,
    },
}
READ_FILE_TOOL: FunctionToolParam = {
    "type": "function",
    "name": "read_file",
    "description": "Read a file.",
    "strict": None,  # the API's default (strict); the SDK's type wants the key
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
        "additionalProperties": False,
    },
}
# The worker's own form of a tool (what the gateway sends it).
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    "required": ["city", "unit"],
    "additionalProperties": False,
}
WEATHER_PROTO_TOOL = cv.Tool(
    name="get_weather",
    description="Weather for a city",
    parameters_json=json.dumps(WEATHER_SCHEMA),
    strict=True,
)
QUESTION = "What is the weather in Paris?"
TERMINAL_WS_EVENTS = ("response.completed", "response.failed", "error")


def only_call(response: Response) -> ResponseFunctionToolCall:
    """The response's one function call."""
    [call] = [item for item in response.output if isinstance(item, ResponseFunctionToolCall)]
    return call


def tool_result(call_id: str, output: str, question: str) -> list[ResponseInputItemParam]:
    """A follow-up's input: the tool's output, then the user's next question."""
    return [
        {"type": "function_call_output", "call_id": call_id, "output": output},
        {"role": "user", "content": question},
    ]


def ask_over_websocket(ws_url: str, api_key: str, timeout: float) -> dict[str, Any]:
    """QUESTION with WEATHER_TOOL as one response.create on a raw socket: its last event."""
    with ws_connect(
        ws_url, additional_headers={"Authorization": f"Bearer {api_key}"}, open_timeout=10
    ) as sock:
        create = {"model": "turnpike-sim", "input": QUESTION, "tools": [WEATHER_TOOL]}
        sock.send(json.dumps({"type": "response.create", **create}))
        while True:
            event = json.loads(sock.recv(timeout=timeout))
            if event["type"] in TERMINAL_WS_EVENTS:
                return event


# The Lark grammar of the Codex CLI's freeform apply_patch tool (codex-rs
# tool_apply_patch.lark), as its models declare it.
APPLY_PATCH_GRAMMAR = """start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
"""
