"""Validation of a create request (``POST /v1/responses`` body or WebSocket
``response.create``) into a typed ``CreateRequest``. Pure: no I/O.

The body's shape is validated by its model (``turnpike.gateway.protocol.create_body``,
the Open Responses body with Turnpike's fields), whose errors become the API's 400s
naming the parameter (``model_errors``); the rules a schema cannot state follow here, in
``request_fields`` and ``tools``, and the items are ``items``'. Unknown top-level keys
are ignored (clients inject them through ``extra_body``), except the API's fields this
server does not implement (``create_body.UNSUPPORTED``).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import ValidationError

from turnpike.conversation.v1 import conversation_pb2
from turnpike.gateway.protocol import request_fields, tools
from turnpike.gateway.protocol.compaction_trigger import take_trigger
from turnpike.gateway.protocol.create_body import (
    STREAM_ID,
    ConversationRef,
    CreateBody,
    WebSocketCreateBody,
)
from turnpike.gateway.protocol.errors import invalid, invalid_type, missing
from turnpike.gateway.protocol.items import Item, normalize_input
from turnpike.gateway.protocol.json_codec import dump_bytes
from turnpike.gateway.protocol.model_errors import api_error
from turnpike.inference.v1 import inference_pb2

STREAM_ID_RE = re.compile(rf"^{STREAM_ID}$")
T = TypeVar("T")
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
    # A rollout waiting on response.inject (beta; turnpike.gateway.protocol.injection).
    multi_agent: bool = False

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


def _validated(body: Any, *, websocket: bool) -> CreateBody:
    """The body's shape, checked by its model: a 400 naming the first parameter at fault."""
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None, "invalid_body")
    request_fields.refuse_unsupported(body)
    model = WebSocketCreateBody if websocket else CreateBody
    try:
        return model.model_validate(body, strict=True)
    except ValidationError as err:
        raise api_error(err, body) from None


def parse_create(
    body: Any, *, default_model: str, websocket: bool = False, multi_agent_beta: bool = False
) -> CreateRequest:
    """Validate a create body. Raises ApiError(400) naming the offending parameter.
    ``multi_agent_beta``: the connection was opened with the multi-agent beta."""
    fields = _validated(body, websocket=websocket)
    multi_agent = fields.multi_agent is not None and fields.multi_agent.enabled
    if multi_agent and not (websocket and multi_agent_beta):
        raise invalid(
            "multi_agent runs a response that waits for response.inject: it needs WebSocket "
            "mode, on a connection opened with the header OpenAI-Beta: "
            "responses_multi_agent=v1.",
            "multi_agent",
            "unsupported_parameter",
        )
    background = bool(fields.background)
    if background and websocket:
        raise invalid(
            "Background responses are not supported in WebSocket mode.",
            "background",
            "unsupported_parameter",
        )
    if background and fields.store is False:
        raise invalid(
            "Background responses must be stored: set 'store' to true or leave it out.",
            "background",
            "invalid_value",
        )
    previous = fields.previous_response_id
    conversation = _conversation_id(fields.conversation)
    if conversation is not None and previous is not None:
        raise invalid(
            "Mutually exclusive parameters: Ensure you are only providing one of: "
            "'previous_response_id' or 'conversation'.",
            "conversation",
            "mutually_exclusive_parameters",
        )
    input_items, compact_now = take_trigger(normalize_input(fields.input, triggers=True))
    if not input_items and previous is None and not websocket:
        raise missing("input")
    tools_given = tools.parse_tools(fields.tools)
    return CreateRequest(
        model=fields.model or default_model,
        input_items=input_items,
        instructions=fields.instructions,
        previous_response_id=previous,
        conversation=conversation,
        tools=tools_given,
        tool_choice=tools.choice(fields.tool_choice, tools.offered(tools_given)),
        parallel_tool_calls=_default(fields.parallel_tool_calls, True),
        max_output_tokens=fields.max_output_tokens,
        max_tool_calls=fields.max_tool_calls,
        temperature=_default(fields.temperature, 1.0),
        top_p=_default(fields.top_p, 1.0),
        top_logprobs=request_fields.top_logprobs(fields.top_logprobs),
        presence_penalty=_default(fields.presence_penalty, 0.0),
        frequency_penalty=_default(fields.frequency_penalty, 0.0),
        truncation=fields.truncation or "disabled",
        text=request_fields.text(fields.text),
        reasoning=request_fields.reasoning(fields.reasoning),
        include=list(fields.include or ()),
        metadata=parse_metadata(fields.metadata),
        client_metadata=request_fields.client_metadata(fields.client_metadata),
        store=_default(fields.store, True),
        stream=bool(fields.stream),
        background=background,
        service_tier=request_fields.service_tier(fields.service_tier),
        user=fields.user,
        safety_identifier=fields.safety_identifier,
        prompt_cache_key=fields.prompt_cache_key,
        prompt_cache_retention=fields.prompt_cache_retention,
        seed=fields.seed,
        compact_threshold=request_fields.compact_threshold(fields.context_management),
        compact_now=compact_now,
        stream_id=getattr(fields, "stream_id", None),
        generate=_default(fields.generate, True),
        multi_agent=multi_agent,
    )


def _default(value: T | None, default: T) -> T:
    return default if value is None else value


def _conversation_id(conversation: str | ConversationRef | None) -> str | None:
    """A conversation's id, given as itself or as ``{"id": ...}``."""
    if conversation is None or isinstance(conversation, str):  # isinstance of a str is quick
        return conversation
    return conversation.id
