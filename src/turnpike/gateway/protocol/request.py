"""Validation of a create request (``POST /v1/responses`` body or WebSocket
``response.create``) into a typed ``CreateRequest``. Pure: no I/O.

Unknown top-level keys are ignored (clients inject them through ``extra_body``), except
the API's fields this server does not implement (``request_fields.UNSUPPORTED``); known
keys of the wrong type get a 400 naming the parameter.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from turnpike.conversation.v1 import conversation_pb2
from turnpike.gateway.protocol import request_fields, tools
from turnpike.gateway.protocol.compaction_trigger import take_trigger
from turnpike.gateway.protocol.errors import invalid, invalid_type, missing, typed_entries
from turnpike.gateway.protocol.items import Item, normalize_input
from turnpike.gateway.protocol.json_codec import dump_bytes
from turnpike.gateway.protocol.tools import TOOL_NAME_RE
from turnpike.inference.v1 import inference_pb2

STREAM_ID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
MAX_METADATA_KEYS = 16


@dataclass
class CreateRequest:
    model: str
    input_items: list[Item]
    instructions: str | None = None
    previous_response_id: str | None = None
    conversation: str | None = None  # a conversation's id (/v1/conversations)
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = "auto"
    parallel_tool_calls: bool = True
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_logprobs: int = 0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    truncation: str = "disabled"
    text: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    reasoning: dict[str, Any] | None = None
    include: list[str] = field(default_factory=list)
    metadata: dict[str, str] = field(default_factory=dict)
    # The client's own annotations (Codex: its trace context); see turnpike.gateway.observability.tracing.
    client_metadata: dict[str, str] = field(default_factory=dict)
    store: bool = True
    stream: bool = False
    background: bool = False  # generation goes on without the client (HTTP only)
    service_tier: str = "default"
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    seed: int | None = None
    # context_management: compact past this many input tokens (turnpike.gateway.sealed.compaction).
    compact_threshold: int | None = None
    # A final compaction_trigger input item: answer one compaction item, generate nothing.
    compact_now: bool = False
    # WebSocket only.
    stream_id: str | None = None
    generate: bool = True

    @functools.cached_property
    def header_key(self) -> str:
        """What a rendered prefix depends on besides the items: instructions and tools."""
        blob = dump_bytes([self.instructions, self.tools], sort_keys=True)
        return hashlib.blake2b(blob, digest_size=16).hexdigest()

    @functools.cached_property
    def offered_tools(self) -> list[dict[str, Any]]:
        """The function and custom tools the model is offered (namespaces flattened;
        turnpike.gateway.protocol.tools)."""
        return tools.offered(self.tools)

    @functools.cached_property
    def _offered_by_name(self) -> dict[str, dict[str, Any]]:
        return {tool["name"]: tool for tool in self.offered_tools}

    def called_tool(self, name: str) -> dict[str, Any] | None:
        """The offered tool a call names (a call carries its namespace and kind)."""
        return self._offered_by_name.get(name)

    @functools.cached_property
    def proto_tools(self) -> list[conversation_pb2.Tool]:
        """The tools as the backends take them (rendering and generation both need them)."""
        return [_proto_tool(tool) for tool in self.offered_tools]

    @functools.cached_property
    def proto_text_format(self) -> inference_pb2.TextFormat:
        """``text.format`` as the worker takes it (the schema as JSON text)."""
        fmt = self.text.get("format") or {}
        if fmt.get("type") != "json_schema":
            return inference_pb2.TextFormat(type=fmt.get("type") or "text")
        return inference_pb2.TextFormat(
            type="json_schema",
            name=fmt["name"],
            description=fmt.get("description") or "",
            schema_json=dump_bytes(fmt["schema"]).decode(),
            strict=bool(fmt.get("strict")),
        )

    def tool_choice_name(self) -> str:
        """tool_choice as the worker's string: auto | none | required | a tool's name."""
        choice = self.tool_choice
        if isinstance(choice, str):
            return choice
        if choice.get("type") in ("function", "custom"):
            return choice["name"]
        return choice.get("mode", "auto")  # allowed_tools

    @functools.cached_property
    def callable_proto_tools(self) -> list[conversation_pb2.Tool]:
        """The tools the model may call: all, or those ``allowed_tools`` names (the
        prompt still shows every tool, so a changing allowed set keeps its cache)."""
        choice = self.tool_choice
        if not isinstance(choice, dict) or choice.get("type") != "allowed_tools":
            return self.proto_tools
        allowed = {t["name"] for t in choice["tools"]}
        return [tool for tool in self.proto_tools if tool.name in allowed]

    @property
    def verbosity(self) -> str:
        return self.text.get("verbosity") or ""


def _opt(body: dict[str, Any], key: str, types: type | tuple[type, ...], expected: str) -> Any:
    value = body.get(key)
    if value is None:
        return None
    # bool is an int in Python; a JSON true is never a valid number here.
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise invalid_type(key, expected)
    if not isinstance(value, types):
        raise invalid_type(key, expected)
    return value


def _proto_tool(tool: dict[str, Any]) -> conversation_pb2.Tool:
    if tool["type"] == "custom":
        return conversation_pb2.Tool(
            name=tool["name"],
            description=tool.get("description") or "",
            custom=True,
            format_json=dump_bytes(tool["format"], sort_keys=True).decode(),
        )
    return conversation_pb2.Tool(
        name=tool["name"],
        description=tool.get("description") or "",
        parameters_json=dump_bytes(tool.get("parameters") or {}, sort_keys=True).decode(),
        strict=bool(tool.get("strict")),
    )


def _number(body: dict[str, Any], key: str, low: float, high: float, default: float) -> float:
    value = _opt(body, key, (int, float), "a number")
    if value is None:
        return default
    if not low <= value <= high:
        raise invalid(
            f"Invalid '{key}': {value} is out of range; expected a number from {low} to {high}.",
            key,
            "invalid_value",
        )
    return float(value)


def _tool_choice(raw: Any, offered: list[dict[str, Any]]) -> Any:
    """``tool_choice``, among the function and custom tools ``offered`` (namespaces
    flattened)."""
    if raw is None:
        return "auto"
    if isinstance(raw, str):
        if raw not in ("auto", "none", "required"):
            raise invalid(
                f"Invalid value for 'tool_choice': '{raw}'. Supported values are 'auto', 'none' and 'required'.",
                "tool_choice",
                "invalid_value",
            )
        if raw == "required" and not offered:
            raise invalid(
                "'tool_choice' is 'required' but no tools were given.",
                "tool_choice",
                "invalid_value",
            )
        return raw
    if not isinstance(raw, dict):
        raise invalid_type("tool_choice", "a string or an object")
    if raw.get("type") in ("function", "custom"):
        name = raw.get("name")
        if not isinstance(name, str):
            raise invalid_type("tool_choice.name", "a string")
        if name not in {t["name"] for t in offered if t["type"] == raw["type"]}:
            raise invalid(
                f"Tool choice '{name}' is not among the given {raw['type']} tools.",
                "tool_choice.name",
                "invalid_value",
            )
        return {"type": raw["type"], "name": name}
    if raw.get("type") == "allowed_tools":
        mode = raw.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise invalid(
                "Invalid 'tool_choice.mode': expected 'auto' or 'required'.",
                "tool_choice.mode",
                "invalid_value",
            )
        names = {t["name"] for t in offered}
        allowed = request_fields.allowed_tools(raw.get("tools"), names)
        return {"type": "allowed_tools", "mode": mode, "tools": allowed}
    raise invalid(
        f"Unsupported tool_choice type '{raw.get('type')}'.", "tool_choice.type", "invalid_value"
    )


def parse_metadata(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise invalid_type("metadata", "an object of string values")
    if len(raw) > MAX_METADATA_KEYS:
        raise invalid(
            f"'metadata' has more than {MAX_METADATA_KEYS} keys.", "metadata", "invalid_value"
        )
    for key, value in raw.items():
        if not isinstance(value, str) or len(key) > 64 or len(value) > 512:
            raise invalid(
                "'metadata' values must be strings (keys up to 64, values up to 512 characters).",
                f"metadata.{key}",
                "invalid_value",
            )
    return dict(raw)


def _conversation(raw: Any) -> str | None:
    """A conversation's id, given as itself or as ``{"id": ...}``."""
    if raw is None:
        return None
    if isinstance(raw, dict):
        raw = raw.get("id")
        if not isinstance(raw, str) or not raw:
            raise invalid_type("conversation.id", "a conversation id string")
    if not isinstance(raw, str) or not raw:
        raise invalid_type("conversation", "a conversation id string or an object with 'id'")
    return raw


def _text(raw: Any) -> dict[str, Any]:
    if raw is None:
        return {"format": {"type": "text"}}
    if not isinstance(raw, dict):
        raise invalid_type("text", "an object")
    fmt = raw.get("format", {"type": "text"})
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        raise invalid(
            "Invalid 'text.format': expected type 'text', 'json_object' or 'json_schema'.",
            "text.format",
            "invalid_value",
        )
    out: dict[str, Any] = {
        "format": _json_schema_format(fmt) if fmt["type"] == "json_schema" else fmt
    }
    if "verbosity" in raw:
        if raw["verbosity"] not in ("low", "medium", "high"):
            raise invalid("Invalid 'text.verbosity'.", "text.verbosity", "invalid_value")
        out["verbosity"] = raw["verbosity"]
    return out


def _json_schema_format(fmt: dict[str, Any]) -> dict[str, Any]:
    """A ``json_schema`` format checked and echoed as the API does (every field present)."""
    for key in ("name", "schema"):
        if fmt.get(key) is None:
            raise invalid(
                f"Missing required parameter: 'text.format.{key}'.",
                f"text.format.{key}",
                "missing_required_parameter",
            )
    name, schema = fmt["name"], fmt["schema"]
    if not isinstance(name, str) or not TOOL_NAME_RE.fullmatch(name):
        raise invalid(
            "Invalid 'text.format.name': 1-64 characters from a-z, A-Z, 0-9, '_' and '-'.",
            "text.format.name",
            "invalid_value",
        )
    if not isinstance(schema, dict):
        raise invalid_type("text.format.schema", "a JSON Schema object")
    description, strict = fmt.get("description"), fmt.get("strict")
    if description is not None and not isinstance(description, str):
        raise invalid_type("text.format.description", "a string")
    if strict is not None and not isinstance(strict, bool):
        raise invalid_type("text.format.strict", "a boolean")
    return {
        "type": "json_schema",
        "name": name,
        "description": description,
        "schema": schema,
        "strict": bool(strict),
    }


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh")
REASONING_SUMMARIES = ("auto", "concise", "detailed")


def _reasoning(raw: Any) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise invalid_type("reasoning", "an object")
    effort, summary = raw.get("effort"), raw.get("summary")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise invalid(
            f"Invalid 'reasoning.effort': expected one of {', '.join(REASONING_EFFORTS)}.",
            "reasoning.effort",
            "invalid_value",
        )
    if summary is not None and summary not in REASONING_SUMMARIES:
        raise invalid(
            f"Invalid 'reasoning.summary': expected one of {', '.join(REASONING_SUMMARIES)}.",
            "reasoning.summary",
            "invalid_value",
        )
    # The spec's Reasoning object needs both keys; fill what the client left out.
    return {"effort": effort, "summary": summary}


# What include may ask for (the API's values); only reasoning.encrypted_content adds to
# the output today, the others name output this server does not produce.
INCLUDABLE = (
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
    "message.input_image.image_url",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
)


def _include(raw: Any) -> list[str]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise invalid_type("include", "an array of strings")
    for i, value in enumerate(raw):
        if value not in INCLUDABLE:
            raise invalid(
                f"Invalid 'include[{i}]': expected one of {', '.join(INCLUDABLE)}.",
                f"include[{i}]",
                "invalid_value",
            )
    return list(raw)


def check_stream_options(raw: Any) -> None:
    """``stream_options`` is an object whose one option is a boolean; nothing to keep."""
    if raw is None:
        return
    if not isinstance(raw, dict):
        raise invalid_type("stream_options", "an object")
    obfuscation = raw.get("include_obfuscation")
    if obfuscation is not None and not isinstance(obfuscation, bool):
        raise invalid_type("stream_options.include_obfuscation", "a boolean")


def _compact_threshold(raw: Any) -> int | None:
    """``context_management: [{"type": "compaction", "compact_threshold": N}]``: N."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise invalid_type("context_management", "an array of context management entries")
    threshold = None
    for param, entry in typed_entries(raw, "context_management", "compaction", "'compaction' is"):
        value = entry.get("compact_threshold")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise invalid_type(f"{param}.compact_threshold", "an integer")
        if value < 1:
            raise invalid(
                f"Invalid '{param}.compact_threshold': expected a positive integer.",
                f"{param}.compact_threshold",
                "invalid_value",
            )
        threshold = value
    return threshold


def parse_create(body: Any, *, default_model: str, websocket: bool = False) -> CreateRequest:
    """Validate a create body. Raises ApiError(400) naming the offending parameter."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_body")
    request_fields.refuse_unsupported(body)
    request_fields.prompt_cache_options(body.get("prompt_cache_options"))
    model = body.get("model", default_model)
    if not isinstance(model, str) or not model:
        raise invalid_type("model", "a model name string")
    background = bool(_opt(body, "background", bool, "a boolean"))
    if background and websocket:
        raise invalid(
            "Background responses are not supported in WebSocket mode.",
            "background",
            "unsupported_parameter",
        )
    if background and body.get("store") is False:
        raise invalid(
            "Background responses must be stored: set 'store' to true or leave it out.",
            "background",
            "invalid_value",
        )
    previous = _opt(body, "previous_response_id", str, "a string")
    conversation = _conversation(body.get("conversation"))
    if conversation is not None and previous is not None:
        raise invalid(
            "Mutually exclusive parameters: Ensure you are only providing one of: "
            "'previous_response_id' or 'conversation'.",
            "conversation",
            "mutually_exclusive_parameters",
        )
    input_items, compact_now = take_trigger(normalize_input(body.get("input"), triggers=True))
    if not input_items and previous is None and not websocket:
        raise missing("input")
    tools_given = tools.parse_tools(body.get("tools"))
    max_output = _opt(body, "max_output_tokens", int, "an integer")
    if max_output is not None and max_output < 16:
        raise invalid(
            f"Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got {max_output} instead.",
            "max_output_tokens",
            "integer_below_min_value",
        )
    max_tool_calls = request_fields.max_tool_calls(body.get("max_tool_calls"))
    truncation = body.get("truncation") or "disabled"
    if truncation not in ("auto", "disabled"):
        raise invalid(
            "Invalid 'truncation': expected 'auto' or 'disabled'.", "truncation", "invalid_value"
        )
    stream_id = None
    if websocket:
        stream_id = _opt(body, "stream_id", str, "a string")
        if stream_id is not None and not STREAM_ID_RE.match(stream_id):
            raise invalid(
                "Invalid 'stream_id': 1-256 characters from A-Z, a-z, 0-9, '_', '.' and '-'.",
                "stream_id",
                "invalid_stream_id",
            )
    generate = _opt(body, "generate", bool, "a boolean")
    instructions = _opt(body, "instructions", str, "a string")
    stream = _opt(body, "stream", bool, "a boolean")
    check_stream_options(body.get("stream_options"))
    store = _opt(body, "store", bool, "a boolean")
    parallel = _opt(body, "parallel_tool_calls", bool, "a boolean")
    return CreateRequest(
        model=model,
        input_items=input_items,
        instructions=instructions,
        previous_response_id=previous,
        conversation=conversation,
        tools=tools_given,
        tool_choice=_tool_choice(body.get("tool_choice"), tools.offered(tools_given)),
        parallel_tool_calls=True if parallel is None else parallel,
        max_output_tokens=max_output,
        max_tool_calls=max_tool_calls,
        temperature=_number(body, "temperature", 0.0, 2.0, 1.0),
        top_p=_number(body, "top_p", 0.0, 1.0, 1.0),
        top_logprobs=request_fields.top_logprobs(body.get("top_logprobs")),
        presence_penalty=_number(body, "presence_penalty", -2.0, 2.0, 0.0),
        frequency_penalty=_number(body, "frequency_penalty", -2.0, 2.0, 0.0),
        truncation=truncation,
        text=_text(body.get("text")),
        reasoning=_reasoning(body.get("reasoning")),
        include=_include(body.get("include")),
        metadata=parse_metadata(body.get("metadata")),
        client_metadata=request_fields.client_metadata(body.get("client_metadata")),
        store=True if store is None else store,
        stream=bool(stream),
        background=background,
        service_tier=request_fields.service_tier(body.get("service_tier")),
        user=_opt(body, "user", str, "a string"),
        safety_identifier=request_fields.identifier(
            body.get("safety_identifier"), "safety_identifier"
        ),
        prompt_cache_key=request_fields.identifier(
            body.get("prompt_cache_key"), "prompt_cache_key"
        ),
        prompt_cache_retention=request_fields.prompt_cache_retention(
            body.get("prompt_cache_retention")
        ),
        seed=_opt(body, "seed", int, "an integer"),
        compact_threshold=_compact_threshold(body.get("context_management")),
        compact_now=compact_now,
        stream_id=stream_id,
        generate=True if generate is None else generate,
    )
