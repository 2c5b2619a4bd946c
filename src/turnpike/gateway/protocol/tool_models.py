"""The ``tools`` and ``tool_choice`` of a create body as this server takes them: the
spec's function tools, and what Turnpike adds (custom and namespace tools, hosted tools
accepted and not run, a custom tool as ``tool_choice``). Their rules beyond the shape
(unique names, a choice among the tools given) are ``turnpike.gateway.protocol.tools``'.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Tag

from turnpike.gateway.protocol.model_errors import matching, tagged

TOOL_NAME = r"[A-Za-z0-9_-]{1,64}"
# A custom tool's grammar travels with every request and is compiled by the backend.
MAX_GRAMMAR_CHARS = 64 * 1024
HostedKind = Literal[
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
]


# A tool's name, a namespace's, a JSON schema format's.
NAME = matching(TOOL_NAME, "1-64 characters from a-z, A-Z, 0-9, '_' and '-'")


Description = Annotated[str | None, Field(description="What the tool does, for the model.")]


class FunctionToolDecl(BaseModel):
    """A function the model may call with a ``function_call`` item."""

    type: Literal["function"]
    name: Annotated[str, NAME]
    description: Description = None
    parameters: Annotated[
        dict[str, Any] | None,
        Field(description="A JSON Schema object: the call's arguments. Default: no arguments."),
    ] = None
    strict: Annotated[
        bool | None, Field(description="Whether the arguments must match the schema. Default true.")
    ] = None


class FreeTextInput(BaseModel):
    """Free-form text input (the default)."""

    type: Literal["text"]


class GrammarInput(BaseModel):
    """Input that a Lark grammar or a regular expression accepts."""

    type: Literal["grammar"]
    syntax: Literal["lark", "regex"]
    definition: Annotated[
        str,
        Field(
            min_length=1,
            max_length=MAX_GRAMMAR_CHARS,
            description="The grammar itself (not only whitespace).",
        ),
    ]


CustomInput = Annotated[
    FreeTextInput | GrammarInput,
    tagged(
        "type",
        "a format object",
        "Invalid format type {kind}: expected 'text' or 'grammar'.",
        "invalid_value",
    ),
]


class CustomToolDecl(BaseModel):
    """Turnpike: a tool called with free-form input (``custom_tool_call``), as Codex
    declares its ``apply_patch``."""

    type: Literal["custom"]
    name: Annotated[str, NAME]
    description: Description = None
    format: Annotated[
        CustomInput | None, Field(description="What the input may be. Default: any text.")
    ] = None


_UNSUPPORTED_TOOL = (
    "Tools of type {kind} are not supported by this server; use function or custom tools "
    "(alone or in a namespace)."
)


Member = Annotated[
    FunctionToolDecl | CustomToolDecl,
    tagged("type", "a tool object", _UNSUPPORTED_TOOL, "unsupported_tool_type"),
]


class NamespaceToolDecl(BaseModel):
    """Turnpike: function and custom tools under one name (as Codex sends its MCP tools).
    A call of one carries the namespace. A tool's name is unique across the request."""

    type: Literal["namespace"]
    name: Annotated[str, NAME]
    description: Description = None
    tools: list[Member]


class HostedToolDecl(BaseModel):
    """Turnpike: a tool the API hosts (web search, file search...). Accepted and echoed
    on the response, but not offered to the model: this server runs none of them."""

    model_config = ConfigDict(extra="allow")
    type: HostedKind


Tool = Annotated[
    FunctionToolDecl | CustomToolDecl | NamespaceToolDecl | HostedToolDecl,
    tagged("type", "a tool object", _UNSUPPORTED_TOOL, "unsupported_tool_type"),
]


class NamedTool(BaseModel):
    """A function or custom tool of the request, by name."""

    type: Literal["function", "custom"]
    name: str


class AllowedTools(BaseModel):
    """The model may call only these of the request's tools (the prompt shows them all)."""

    type: Literal["allowed_tools"]
    mode: Literal["auto", "required"] | None = None
    tools: Annotated[list[NamedTool], Field(min_length=1)]


def _choice_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "<mode>"
    if not isinstance(value, dict):
        return None
    kind = value.get("type")
    return "<named>" if kind in ("function", "custom") else f"<{kind}>"


ToolChoice = Annotated[
    Annotated[Literal["auto", "none", "required"], Tag("<mode>")]
    | Annotated[NamedTool, Tag("<named>")]
    | Annotated[AllowedTools, Tag("<allowed_tools>")],
    tagged(
        _choice_kind,
        "a string or an object",
        "Unsupported tool_choice type {kind}.",
        "invalid_value",
    ),
]
