"""The ``tools`` of a create request. Pure: no I/O.

- ``function`` tools: offered to the model, called with ``function_call`` items.
- ``custom`` tools (free-form input in a ``format``: text, or a ``lark`` or ``regex``
  grammar, as Codex declares its ``apply_patch``): called with ``custom_tool_call`` items
  whose ``input`` is the text itself, not JSON. The grammar travels to the backend, which
  writes input it accepts.
- ``namespace`` tools (a group of function and custom tools under a name, as Codex sends
  its multi-agent and MCP tools): their tools are offered to the model, and a call of one
  carries the namespace (``namespace`` on the call item). A tool's name is unique across
  the request, namespaces included, so a call names one tool.
- Hosted tools (``HOSTED``: web search, file search, tool search, code interpreter...): this
  server runs none of them. A request that offers one is served all the same: the tool is
  echoed on the response and not offered to the model, which answers as a model that chose
  not to use it. An agent's session does not end because one optional tool is missing;
  ``tool_choice`` naming one is still a 400, since that answer cannot be served. A
  function with ``defer_loading`` (found through ``tool_search`` by OpenAI's models) is
  offered directly.

``parse_tools`` gives the tools as echoed; ``offered`` the function and custom tools the
model is offered, flattened, each with its ``namespace`` when it has one.
"""

from __future__ import annotations

import re
from typing import Any

from turnpike.gateway.protocol.errors import invalid, invalid_type

TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
# A custom tool's grammar travels with every request and is compiled by the backend.
MAX_GRAMMAR_CHARS = 64 * 1024
GRAMMAR_SYNTAXES = ("lark", "regex")
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
        elif kind == "custom":
            tools.append(_custom(tool, param, names))
        elif kind == "namespace":
            tools.append(_namespace(tool, param, names))
        elif kind in HOSTED:
            tools.append(dict(tool))
        else:
            raise _unsupported(kind, param)
    return tools


def offered(tools: list[Tool]) -> list[Tool]:
    """The function and custom tools the model is offered: top-level ones and those of
    every namespace (with ``namespace`` set), in the request's order."""
    offered: list[Tool] = []
    for tool in tools:
        if tool["type"] in ("function", "custom"):
            offered.append(tool)
        elif tool["type"] == "namespace":
            offered.extend({**inner, "namespace": tool["name"]} for inner in tool["tools"])
    return offered


def _unsupported(kind: Any, param: str) -> Exception:
    return invalid(
        f"Tools of type '{kind}' are not supported by this server; use function or custom "
        "tools (alone or in a namespace).",
        f"{param}.type",
        "unsupported_tool_type",
    )


def _namespace(tool: Tool, param: str, names: set[str]) -> Tool:
    name = _name(tool, param, "a namespace name")
    description = _description(tool, param)
    inner = tool.get("tools")
    if not isinstance(inner, list):
        raise invalid_type(f"{param}.tools", "an array of function and custom tools")
    members = []
    for j, member in enumerate(inner):
        member_param = f"{param}.tools[{j}]"
        if not isinstance(member, dict):
            raise invalid_type(member_param, "a tool object")
        if member.get("type") == "function":
            members.append(_function(member, member_param, names))
        elif member.get("type") == "custom":
            members.append(_custom(member, member_param, names))
        else:
            raise _unsupported(member.get("type"), member_param)
    return {"type": "namespace", "name": name, "description": description or "", "tools": members}


def _function(tool: Tool, param: str, names: set[str]) -> Tool:
    name = _unique_name(tool, param, "a function name", names)
    parameters = tool.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise invalid_type(f"{param}.parameters", "a JSON Schema object")
    description = _description(tool, param)
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


def _custom(tool: Tool, param: str, names: set[str]) -> Tool:
    name = _unique_name(tool, param, "a tool name", names)
    description = _description(tool, param)
    return {
        "type": "custom",
        "name": name,
        "description": description,
        "format": _custom_format(tool.get("format"), f"{param}.format"),
    }


def _custom_format(raw: Any, param: str) -> dict[str, str]:
    """``{"type": "text"}`` (the default) or a ``lark`` or ``regex`` grammar, bounded."""
    if raw is None:
        return {"type": "text"}
    if not isinstance(raw, dict):
        raise invalid_type(param, "a format object")
    kind = raw.get("type")
    if kind == "text":
        return {"type": "text"}
    if kind != "grammar":
        raise invalid(
            f"Invalid '{param}.type': expected 'text' or 'grammar'.",
            f"{param}.type",
            "invalid_value",
        )
    syntax = raw.get("syntax")
    if syntax not in GRAMMAR_SYNTAXES:
        raise invalid(
            f"Invalid '{param}.syntax': expected 'lark' or 'regex'.",
            f"{param}.syntax",
            "invalid_value",
        )
    definition = raw.get("definition")
    if not isinstance(definition, str) or not definition.strip():
        raise invalid_type(f"{param}.definition", "a non-empty grammar definition")
    if len(definition) > MAX_GRAMMAR_CHARS:
        raise invalid(
            f"Invalid '{param}.definition': a grammar is at most {MAX_GRAMMAR_CHARS} characters.",
            f"{param}.definition",
            "string_above_max_length",
        )
    return {"type": "grammar", "syntax": syntax, "definition": definition}


def _description(tool: Tool, param: str) -> str | None:
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise invalid_type(f"{param}.description", "a string")
    return description


def _unique_name(tool: Tool, param: str, what: str, names: set[str]) -> str:
    name = _name(tool, param, what)
    if name in names:
        raise invalid(
            f"Duplicate tool name '{name}' in tools (namespaces included).",
            f"{param}.name",
            "invalid_value",
        )
    names.add(name)
    return name


def _name(tool: Tool, param: str, what: str) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not TOOL_NAME_RE.fullmatch(name):
        raise invalid(
            f"Invalid '{param}.name': {what} is 1-64 letters, digits, '_' or '-'.",
            f"{param}.name",
            "invalid_value",
        )
    return name
