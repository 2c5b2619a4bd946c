"""The ``tools`` of a create request. Pure: no I/O.

- ``function`` tools: offered to the model, called with ``function_call`` items.
- ``namespace`` tools (a group of function tools under a name, as Codex sends its
  multi-agent and MCP tools): their functions are offered to the model as functions, and
  a call of one carries the namespace (``function_call.namespace``). A function's name is
  unique across the request, namespaces included, so a call names one function.
- Hosted tools (``HOSTED``: web search, file search, tool search, code interpreter...): this
  server runs none of them. A request that offers one is served all the same: the tool is
  echoed on the response and not offered to the model, which answers as a model that chose
  not to use it. An agent's session does not end because one optional tool is missing;
  ``tool_choice`` naming one is still a 400, since that answer cannot be served. A
  function with ``defer_loading`` (found through ``tool_search`` by OpenAI's models) is
  offered directly.
- ``custom`` tools (free-form input, a grammar) are not served yet: a 400.

``parse_tools`` gives the tools as echoed; ``functions`` the function tools the model is
offered, flattened, each with its ``namespace`` when it has one.
"""

from __future__ import annotations

import re
from typing import Any

from gateway.errors import invalid, invalid_type

TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
HOSTED = frozenset(
    {
        "web_search",
        "web_search_2025_08_26",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "tool_search",
        "code_interpreter",
        "image_generation",
        "computer",
        "computer_use_preview",
        "mcp",
        "local_shell",
        "shell",
        "apply_patch",
    }
)
Tool = dict[str, Any]


def parse_tools(raw: Any) -> list[Tool]:
    """The tools as the response echoes them (functions normalized, hosted tools as sent),
    or a 400 naming the parameter."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise invalid_type("tools", "an array of tools")
    tools: list[Tool] = []
    names: set[str] = set()
    for i, tool in enumerate(raw):
        param = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise invalid_type(param, "a tool object")
        kind = tool.get("type")
        if kind == "function":
            tools.append(_function(tool, param, names))
        elif kind == "namespace":
            tools.append(_namespace(tool, param, names))
        elif kind in HOSTED:
            tools.append(dict(tool))
        else:
            raise _unsupported(kind, param)
    return tools


def functions(tools: list[Tool]) -> list[Tool]:
    """The function tools the model is offered: top-level ones and those of every
    namespace (with ``namespace`` set), in the request's order."""
    offered: list[Tool] = []
    for tool in tools:
        if tool["type"] == "function":
            offered.append(tool)
        elif tool["type"] == "namespace":
            offered.extend({**inner, "namespace": tool["name"]} for inner in tool["tools"])
    return offered


def _unsupported(kind: Any, param: str) -> Exception:
    what = "Custom tools are" if kind == "custom" else f"Tools of type '{kind}' are"
    return invalid(
        f"{what} not supported by this server; use function tools (alone or in a namespace).",
        f"{param}.type",
        "unsupported_tool_type",
    )


def _namespace(tool: Tool, param: str, names: set[str]) -> Tool:
    name = _name(tool, param, "a namespace name")
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid_type(f"{param}.description", "a string")
    inner = tool.get("tools")
    if not isinstance(inner, list):
        raise invalid_type(f"{param}.tools", "an array of function tools")
    members = []
    for j, member in enumerate(inner):
        member_param = f"{param}.tools[{j}]"
        if not isinstance(member, dict):
            raise invalid_type(member_param, "a tool object")
        if member.get("type") != "function":
            raise _unsupported(member.get("type"), member_param)
        members.append(_function(member, member_param, names))
    return {"type": "namespace", "name": name, "description": description or "", "tools": members}


def _function(tool: Tool, param: str, names: set[str]) -> Tool:
    name = _name(tool, param, "a function name")
    if name in names:
        raise invalid(
            f"Duplicate function name '{name}' in tools (namespaces included).",
            f"{param}.name",
            "invalid_value",
        )
    names.add(name)
    parameters = tool.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise invalid_type(f"{param}.parameters", "a JSON Schema object")
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid_type(f"{param}.description", "a string")
    strict = tool.get("strict", True)
    if strict is not None and not isinstance(strict, bool):
        raise invalid_type(f"{param}.strict", "a boolean")
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": parameters
        if parameters is not None
        else {"type": "object", "properties": {}},
        "strict": True if strict is None else strict,
    }


def _name(tool: Tool, param: str, what: str) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not TOOL_NAME_RE.fullmatch(name):
        raise invalid(
            f"Invalid '{param}.name': {what} is 1-64 letters, digits, '_' or '-'.",
            f"{param}.name",
            "invalid_value",
        )
    return name
