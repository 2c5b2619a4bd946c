"""Tool types beyond plain functions (issue 20): ``namespace`` tools, whose functions are
offered to the model and whose calls carry the namespace, and hosted tools this server
does not run, which a request may offer and still be served. The tools are the ones the
Codex CLI sends by default."""

from __future__ import annotations

import json

import httpx
import pytest
from gateway.errors import ApiError
from gateway.request import parse_create
from openai.types.responses import Response
from websockets.sync.client import connect as ws_connect


def function(name: str, required: list[str] | None = None) -> dict:
    props = {key: {"type": "string"} for key in required or []}
    return {
        "type": "function",
        "name": name,
        "description": f"{name} tool",
        "parameters": {"type": "object", "properties": props, "required": required or []},
        "strict": False,
    }


# What Codex 0.163 sends by default: function tools, a namespace, a hosted web search.
CODEX_TOOLS = [
    function("exec_command", ["cmd"]),
    function("write_stdin", ["session_id"]),
    function("update_plan", ["plan"]),
    {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "Sub-agents.",
        "tools": [function("spawn_agent", ["message"]), function("wait_agent", ["id"])],
    },
    {"type": "web_search", "external_web_access": False},
]


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
    assert request.namespace_of("spawn_agent") == "multi_agent_v1"
    assert request.namespace_of("exec_command") is None


@pytest.mark.parametrize(
    ("tools", "param", "code"),
    [
        ([{"type": "custom", "name": "apply_patch"}], "tools[0].type", "unsupported_tool_type"),
        (
            [{"type": "namespace", "name": "ns", "tools": [{"type": "custom", "name": "x"}]}],
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
    assert err.value.status == 400 and err.value.param.startswith("tool_choice")


def test_a_namespaced_function_can_be_named_by_tool_choice() -> None:
    choice = {"type": "function", "name": "spawn_agent"}
    request = parse({"input": "hi", "tools": CODEX_TOOLS, "tool_choice": choice})
    assert request.tool_choice_name() == "spawn_agent"


@pytest.mark.stack
def test_a_namespaced_call_carries_its_namespace_and_continues_over_http(stack) -> None:
    headers = {"Authorization": f"Bearer {stack.api_key}"}
    tools = [CODEX_TOOLS[3], CODEX_TOOLS[4]]  # only the namespace's functions can be called
    body = {"model": "turnpike-sim", "input": "Spawn an agent to say hi", "tools": tools}
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
    body = {"model": "turnpike-sim", "input": history, "tools": tools, "store": False}
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
