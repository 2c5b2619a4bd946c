"""Tool types beyond plain functions (issue 20): ``namespace`` tools, whose functions are
offered to the model and whose calls carry the namespace; ``custom`` tools, called with
free-form input that their grammar accepts; and hosted tools this server does not run,
which a request may offer and still be served. The tools are the ones the Codex CLI sends
by default, its freeform ``apply_patch`` included."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from openai.types.responses import (
    CustomToolParam,
    FunctionToolParam,
    Response,
    ResponseCustomToolCallOutputParam,
    ToolParam,
)
from support.sdk import as_input
from support.tools import APPLY_PATCH_GRAMMAR
from websockets.sync.client import connect as ws_connect

from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.request import parse_create


def function(name: str, required: list[str] | None = None) -> FunctionToolParam:
    props = {key: {"type": "string"} for key in required or []}
    return {
        "type": "function",
        "name": name,
        "description": f"{name} tool",
        "parameters": {"type": "object", "properties": props, "required": required or []},
        "strict": False,
    }


# What Codex 0.163 sends by default: function tools, a namespace, a hosted web search.
CODEX_TOOLS: list[ToolParam] = [
    function("exec_command", ["cmd"]),
    function("write_stdin", ["session_id"]),
    function("update_plan", ["plan"]),
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Sub-agents.",
        # Copies: the SDK types a namespace's functions apart from top-level ones.
        "tools": [{**function("spawn_agent", ["message"])}, {**function("wait_agent", ["id"])}],
    },
    {"type": "web_search", "external_web_access": False},
]
# Codex's freeform apply_patch, as its own models declare it.
APPLY_PATCH: CustomToolParam = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the `apply_patch` tool to edit files. This is a FREEFORM tool.",
    "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_GRAMMAR},
}


def parse(body: dict):
    return parse_create(body, default_model="turnpike-sim")


def test_codex_tools_are_accepted_echoed_and_flattened_for_the_model() -> None:
    request = parse({"input": "hi", "tools": CODEX_TOOLS})
    assert [t["type"] for t in request.tools] == [
        "function", "function", "function", "namespace", "web_search"
    ]  # fmt: skip
    assert request.tools[4] == {"type": "web_search", "external_web_access": False}
    offered = [tool.name for tool in request.proto_tools]
    assert offered == ["exec_command", "write_stdin", "update_plan", "spawn_agent", "wait_agent"]
    assert request.called_tool("spawn_agent")["namespace"] == "multi_agent_v1"
    assert "namespace" not in request.called_tool("exec_command")


def test_custom_tools_are_accepted_alone_and_in_a_namespace() -> None:
    namespaced = {"type": "namespace", "name": "edits", "tools": [{**APPLY_PATCH, "name": "p2"}]}
    plain = {"type": "custom", "name": "note"}  # no format: free text
    request = parse({"input": "hi", "tools": [APPLY_PATCH, namespaced, plain]})
    assert request.tools[0] == APPLY_PATCH
    assert request.tools[2] == {
        "type": "custom", "name": "note", "description": None, "format": {"type": "text"}
    }  # fmt: skip
    patch, p2, note = request.proto_tools
    assert patch.custom and not patch.parameters_json
    assert json.loads(patch.format_json)["definition"] == APPLY_PATCH_GRAMMAR
    assert request.called_tool("p2")["namespace"] == "edits" and p2.custom
    assert json.loads(note.format_json) == {"type": "text"}
    choice = parse(
        {
            "input": "hi",
            "tools": [APPLY_PATCH],
            "tool_choice": {"type": "custom", "name": "apply_patch"},
        }
    )
    assert choice.tool_choice_name() == "apply_patch"


@pytest.mark.parametrize(
    ("tools", "param", "code"),
    [
        (
            [{**APPLY_PATCH, "format": {"type": "grammar", "syntax": "ebnf", "definition": "x"}}],
            "tools[0].format.syntax",
            "invalid_value",
        ),
        (
            [{**APPLY_PATCH, "format": {"type": "grammar", "syntax": "lark", "definition": ""}}],
            "tools[0].format.definition",
            "invalid_type",
        ),
        (
            [
                {
                    **APPLY_PATCH,
                    "format": {"type": "grammar", "syntax": "regex", "definition": "a" * 70_000},
                }
            ],
            "tools[0].format.definition",
            "string_above_max_length",
        ),
        ([{**APPLY_PATCH, "format": {"type": "json"}}], "tools[0].format.type", "invalid_value"),
        ([APPLY_PATCH, function("apply_patch")], "tools[1].name", "invalid_value"),
        (
            [{"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}],
            "tools[0].tools[0].type",
            "unsupported_tool_type",
        ),
        ([{"type": "namespace", "name": "ns", "tools": "x"}], "tools[0].tools", "invalid_type"),
        ([{"type": "namespace", "name": "a b", "tools": []}], "tools[0].name", "invalid_value"),
        (
            [function("go"), {"type": "namespace", "name": "ns", "tools": [function("go")]}],
            "tools[1].tools[0].name",
            "invalid_value",
        ),
        ([{"type": "teleport"}], "tools[0].type", "unsupported_tool_type"),
    ],
)
def test_tools_that_cannot_be_served_are_a_400_naming_them(tools, param, code) -> None:
    with pytest.raises(ApiError) as err:
        parse({"input": "hi", "tools": tools})
    assert (err.value.status, err.value.param, err.value.code) == (400, param, code)


def test_a_hosted_tool_cannot_be_forced() -> None:
    with pytest.raises(ApiError) as err:
        parse({"input": "hi", "tools": CODEX_TOOLS, "tool_choice": {"type": "web_search"}})
    assert err.value.status == 400
    assert err.value.param is not None and err.value.param.startswith("tool_choice")


def test_a_namespaced_function_can_be_named_by_tool_choice() -> None:
    choice = {"type": "function", "name": "spawn_agent"}
    request = parse({"input": "hi", "tools": CODEX_TOOLS, "tool_choice": choice})
    assert request.tool_choice_name() == "spawn_agent"


@pytest.mark.stack
def test_a_namespaced_call_carries_its_namespace_and_continues_over_http(stack) -> None:
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    tools = [CODEX_TOOLS[3], CODEX_TOOLS[4]]  # only the namespace's functions can be called
    body: dict[str, Any] = {
        "model": "turnpike-sim",
        "input": "Spawn an agent to say hi",
        "tools": tools,
    }
    reply = httpx.post(f"{stack.base_url}/responses", json=body, headers=headers, timeout=60)
    assert reply.status_code == 200, reply.text
    response = Response.model_validate(reply.json())  # the SDK's own types read it
    [call] = [item for item in response.output if item.type == "function_call"]
    assert call.namespace == "multi_agent_v1" and call.name in ("spawn_agent", "wait_agent")
    assert reply.json()["tools"][1] == {"type": "web_search", "external_web_access": False}
    follow = {
        "model": "turnpike-sim",
        "previous_response_id": response.id,
        "tools": tools,
        "input": [{"type": "function_call_output", "call_id": call.call_id, "output": "done"}],
    }
    reply = httpx.post(f"{stack.base_url}/responses", json=follow, headers=headers, timeout=60)
    assert reply.status_code == 200 and reply.json()["status"] == "completed", reply.text
    # Stateless, as Codex over HTTP: the whole history sent back, the call with its namespace.
    history = [
        {"role": "user", "content": "Spawn an agent to say hi"},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": "done"},
    ]
    body = {
        "model": "turnpike-sim",
        "input": history,
        "tools": tools,
        "store": False,
    }
    reply = httpx.post(f"{stack.base_url}/responses", json=body, headers=headers, timeout=60)
    assert reply.status_code == 200 and reply.json()["status"] == "completed", reply.text


@pytest.mark.stack
def test_codex_tools_over_websocket_with_a_warm_up(stack) -> None:
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    with ws_connect(stack.ws_url, additional_headers=headers) as sock:

        def turn(body: dict) -> dict:
            sock.send(json.dumps({"type": "response.create", "model": "turnpike-sim", **body}))
            while True:
                event = json.loads(sock.recv(timeout=60))
                if event["type"] in ("response.completed", "response.failed", "error"):
                    return event

        warm = turn({"input": [], "tools": CODEX_TOOLS, "generate": False, "store": False})
        assert warm["type"] == "response.completed", warm
        done = turn(
            {
                "input": "Run `ls` please",
                "tools": CODEX_TOOLS,
                "store": False,
                "previous_response_id": warm["response"]["id"],
            }
        )
        assert done["type"] == "response.completed", done
        assert any(item["type"] == "function_call" for item in done["response"]["output"])


# An Add File patch, as the apply_patch grammar derives it (add_hunk: one or more "+" lines).
ADD_FILE_PATCH = re.compile(
    r"\*\*\* Begin Patch\n\*\*\* Add File: (\S+)\n(?:\+.*\n)+\*\*\* End Patch\n?"
)


@pytest.mark.stack
def test_a_custom_tool_call_streams_its_input_and_takes_its_output(stack) -> None:
    """Codex's freeform apply_patch over the SDK's own stream types: the call's input
    streams as response.custom_tool_call_input.delta/.done, parses under the grammar, and a
    custom_tool_call_output continues the response, chained and stateless."""
    from openai import OpenAI

    client = OpenAI(base_url=stack.base_url, api_key=stack.api_key)
    prompt = "Apply a patch that adds notes.md with a greeting."
    tools: list[ToolParam] = [APPLY_PATCH, CODEX_TOOLS[0]]
    with client.responses.stream(model="turnpike-sim", input=prompt, tools=tools) as stream:
        events = list(stream)
        response = stream.get_final_response()
    kinds = [event.type for event in events]
    assert "response.custom_tool_call_input.delta" in kinds, kinds
    [done] = [e for e in events if e.type == "response.custom_tool_call_input.done"]
    [call] = [item for item in response.output if item.type == "custom_tool_call"]
    streamed = "".join(e.delta for e in events if e.type == "response.custom_tool_call_input.delta")
    assert call.name == "apply_patch" and call.input == done.input == streamed
    added = ADD_FILE_PATCH.fullmatch(call.input)
    assert added and added[1] == "notes.md", call.input

    output: ResponseCustomToolCallOutputParam = {
        "type": "custom_tool_call_output",
        "call_id": call.call_id,
        "output": "Done!",
    }
    chained = client.responses.create(
        model="turnpike-sim", previous_response_id=response.id, input=[output], tools=tools
    )
    assert chained.status == "completed" and chained.output[-1].type == "message"
    history = [{"role": "user", "content": prompt}, call.model_dump(exclude_none=True), output]
    stateless = client.responses.create(
        model="turnpike-sim", input=as_input(history), tools=tools, store=False
    )
    assert stateless.status == "completed" and stateless.output[-1].type == "message"
    # An output must answer a custom call: a function call's id is not one.
    with pytest.raises(Exception) as refused:
        client.responses.create(
            model="turnpike-sim",
            input=[{"role": "user", "content": "hi"}, {**output, "call_id": "call_nope"}],
            tools=tools,
        )
    assert getattr(refused.value, "status_code", None) == 400


@pytest.mark.stack
def test_a_plan_gets_one_call_per_step_over_websocket(stack) -> None:
    """A numbered plan is followed one step per turn (turnpike.worker.answers): a command, then a
    patch, then the closing message; each call answered with its own kind of output."""
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    plan = "Do this:\n1. Run `git status`.\n2. Apply a patch that adds notes.md.\n"
    tools = [function("exec_command", ["cmd"]), APPLY_PATCH]
    seen = []
    with ws_connect(stack.ws_url, additional_headers=headers) as sock:
        body = {"model": "turnpike-sim", "input": plan, "tools": tools}
        for _ in range(3):
            sock.send(json.dumps({"type": "response.create", **body}))
            while True:
                event = json.loads(sock.recv(timeout=60))
                if event["type"] in ("response.completed", "response.failed", "error"):
                    break
            assert event["type"] == "response.completed", event
            response = Response.model_validate(event["response"])
            item = response.output[-1]
            seen.append(item.type)
            if item.type == "message":
                break
            assert item.type in ("custom_tool_call", "function_call"), item
            kind = (
                "custom_tool_call_output"
                if item.type == "custom_tool_call"
                else "function_call_output"
            )
            body = {
                "model": "turnpike-sim",
                "previous_response_id": response.id,
                "tools": tools,
                "input": [{"type": kind, "call_id": item.call_id, "output": "ok"}],
            }
    assert seen == ["function_call", "custom_tool_call", "message"]
