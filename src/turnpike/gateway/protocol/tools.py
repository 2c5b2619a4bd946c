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
- Hosted tools (``tool_models.HostedKind``: web search, file search, tool search, code
  interpreter...): this server runs none of them. A request that offers one is served all the same: the tool is
  echoed on the response and not offered to the model, which answers as a model that chose
  not to use it. An agent's session does not end because one optional tool is missing;
  ``tool_choice`` naming one is still a 400, since that answer cannot be served. A
  function with ``defer_loading`` (found through ``tool_search`` by OpenAI's models) is
  offered directly.

Their shapes are declared in ``turnpike.gateway.protocol.tool_models`` (and validated
with the create body); here, what a shape cannot state. ``parse_tools`` gives the tools as
echoed (names unique across the request); ``offered`` the function and custom tools the
model is offered, flattened, each with its ``namespace`` when it has one; ``choice`` the
``tool_choice``, among them.
"""

from __future__ import annotations

from typing import Any

from turnpike.gateway.protocol.errors import invalid, invalid_type
from turnpike.gateway.protocol.tool_models import (
    AllowedTools,
    CustomToolDecl,
    FreeTextInput,
    FunctionToolDecl,
    GrammarInput,
    HostedToolDecl,
    NamedTool,
    NamespaceToolDecl,
)

Tool = dict[str, Any]
Declared = FunctionToolDecl | CustomToolDecl | NamespaceToolDecl | HostedToolDecl


def parse_tools(declared: list[Declared] | None) -> list[Tool]:
    """The tools as the response echoes them: functions with their defaults, hosted
    tools as sent; a 400 for a name used twice."""
    tools: list[Tool] = []
    names: set[str] = set()
    # By ``type``, not isinstance: a pydantic model's isinstance is slow.
    for i, tool in enumerate(declared or ()):
        param = f"tools[{i}]"
        if tool.type == "namespace":
            tools.append(_namespace(tool, param, names))
        elif tool.type in ("function", "custom"):
            tools.append(_member(tool, param, names))
        else:
            tools.append(tool.model_dump())
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


def choice(declared: str | NamedTool | AllowedTools | None, offered: list[Tool]) -> Any:
    """``tool_choice`` as the request keeps it, among the function and custom tools
    ``offered`` (namespaces flattened)."""
    if declared is None:
        return "auto"
    if isinstance(declared, str):  # a str, not a model: isinstance is quick
        if declared == "required" and not offered:
            raise invalid(
                "'tool_choice' is 'required' but no tools were given.",
                "tool_choice",
                "invalid_value",
            )
        return declared
    if declared.type != "allowed_tools":
        if declared.name not in {t["name"] for t in offered if t["type"] == declared.type}:
            raise invalid(
                f"Tool choice '{declared.name}' is not among the given {declared.type} tools.",
                "tool_choice.name",
                "invalid_value",
            )
        return {"type": declared.type, "name": declared.name}
    names = {t["name"] for t in offered}
    for i, tool in enumerate(declared.tools):
        if tool.name not in names:
            raise invalid(
                f"Tool choice '{tool.name}' is not among the given tools.",
                f"tool_choice.tools[{i}].name",
                "invalid_value",
            )
    return {
        "type": "allowed_tools",
        "mode": declared.mode or "auto",
        "tools": [{"type": tool.type, "name": tool.name} for tool in declared.tools],
    }


def _namespace(tool: NamespaceToolDecl, param: str, names: set[str]) -> Tool:
    members = [_member(m, f"{param}.tools[{j}]", names) for j, m in enumerate(tool.tools)]
    return {
        "type": "namespace",
        "name": tool.name,
        "description": tool.description or "",
        "tools": members,
    }


def _member(tool: FunctionToolDecl | CustomToolDecl, param: str, names: set[str]) -> Tool:
    if tool.name in names:
        raise invalid(
            f"Duplicate tool name '{tool.name}' in tools (namespaces included).",
            f"{param}.name",
            "invalid_value",
        )
    names.add(tool.name)
    if tool.type == "custom":
        return {
            "type": "custom",
            "name": tool.name,
            "description": tool.description,
            "format": _custom_format(tool.format, f"{param}.format"),
        }
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": {"type": "object", "properties": {}}
        if tool.parameters is None
        else tool.parameters,
        "strict": True if tool.strict is None else tool.strict,
    }


def _custom_format(declared: FreeTextInput | GrammarInput | None, param: str) -> dict[str, str]:
    """``{"type": "text"}`` (the default) or a ``lark`` or ``regex`` grammar."""
    if declared is None or declared.type == "text":
        return {"type": "text"}
    if not declared.definition.strip():
        raise invalid_type(f"{param}.definition", "a non-empty grammar definition")
    return {"type": "grammar", "syntax": declared.syntax, "definition": declared.definition}
