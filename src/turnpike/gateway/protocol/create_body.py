"""Turnpike's create body: the Open Responses ``CreateResponseBody`` (generated from the
spec in ``openresponses``), with the fields this server adds and those it takes otherwise
than the spec states, declared beside it.

One declaration for two uses: ``turnpike.gateway.protocol.request.parse_create`` validates
a body with it (the shape: types, enums, bounds), and the OpenAPI document describes the
create body from it (``scripts/gen_openapi.py``). What a schema cannot state stays
hand-written after the model (a choice among the tools given, cross-field rules, the
items' canonical shapes). Unknown keys are ignored: clients inject their own through
``extra_body``.

A few fields are declared, not validated here (``SkipValidation``): ``input`` (the items,
``turnpike.gateway.protocol.items``), ``metadata`` (shared with conversations) and
``client_metadata``: their checks name the parameter more precisely than a union of
models does, and cost less.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SkipValidation, Tag

from turnpike.gateway.protocol.item_models import CreateInputItem
from turnpike.gateway.protocol.model_errors import Between, matching, tagged
from turnpike.gateway.protocol.openresponses import CreateResponseBody, MetadataParam
from turnpike.gateway.protocol.tool_models import NAME, Tool, ToolChoice

# A WebSocket create's lane (stream_id).
STREAM_ID = r"[A-Za-z0-9_.-]{1,256}"
MAX_CLIENT_METADATA_KEYS = 64
# Fields of the API this server does not implement, and would answer differently
# without: a request that sets one is refused rather than answered as if it did not.
UNSUPPORTED = {
    "prompt": "Prompt templates are not supported by this server; send 'instructions' and 'input'.",
    "moderation": "Moderation configuration is not supported by this server.",
    "access_programs": "Access programs are not supported by this server.",
    "image": "Request-level image options are not supported by this server.",
}
# What include may ask for (the API's values); only reasoning.encrypted_content adds to
# the output today, the others name output this server does not produce.
Includable = Literal[
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
    "message.input_image.image_url",
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "code_interpreter_call.outputs",
    "computer_call_output.output.image_url",
]


def spec_field(name: str, more: str = "") -> Any:
    """A field's description as the spec states it (and what Turnpike adds)."""
    text = CreateResponseBody.model_fields[name].description or ""
    return Field(None, description=f"{text} {more}".strip())


class PlainTextFormat(BaseModel):
    """Plain text (the default)."""

    type: Literal["text"]


class JsonObjectFormat(BaseModel):
    """Any JSON object."""

    type: Literal["json_object"]


class JsonSchemaFormat(BaseModel):
    """JSON that matches ``schema``."""

    type: Literal["json_schema"]
    name: Annotated[str, NAME]
    schema_: Annotated[dict[str, Any], Field(alias="schema", description="A JSON Schema object.")]
    description: str | None = None
    strict: bool | None = None


TextFormat = Annotated[
    PlainTextFormat | JsonObjectFormat | JsonSchemaFormat,
    tagged("type", "a format of type 'text', 'json_object' or 'json_schema'"),
]


class TextOptions(BaseModel):
    """The output's format, and how much the model writes."""

    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningOptions(BaseModel):
    """How much the model reasons, and the summary of its reasoning."""

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class ConversationRef(BaseModel):
    """A conversation, by its id."""

    id: Annotated[str, Field(min_length=1)]


def _conversation_kind(value: Any) -> str | None:
    if isinstance(value, str):
        return "<id>"
    return "<object>" if isinstance(value, dict) else None


Conversation = Annotated[
    Annotated[Annotated[str, Field(min_length=1)], Tag("<id>")]
    | Annotated[ConversationRef, Tag("<object>")],
    tagged(_conversation_kind, "a conversation id string or an object with 'id'"),
]


class CompactionOption(BaseModel):
    """Compact the context once the input passes ``compact_threshold`` tokens."""

    type: Literal["compaction"]
    compact_threshold: Annotated[int, Between(1, expected="an integer")] | None = None


class MultiAgentOption(BaseModel):
    """OpenAI's server-hosted multi-agent execution (beta). Here it runs the response as
    one rollout that waits for the client's tool outputs (``response.inject``); no
    subagents are hosted."""

    enabled: bool
    max_concurrent_subagents: Annotated[int, Between(1, expected="an integer")] | None = None


def _refused(field: str) -> Any:
    return Field(None, description=f"Turnpike: {UNSUPPORTED[field]} Refused when set.")


class CreateBody(CreateResponseBody):
    """A create request (``POST /v1/responses``, ``/v1/responses/input_tokens``,
    ``/v1/responses/compact``): the Open Responses body, with Turnpike's fields."""

    # The spec's fields this server takes otherwise than the spec states (a field whose
    # type differs from the spec's is marked for mypy: `ignore[assignment]`).
    model: Annotated[str, Field(min_length=1)] | None = spec_field(
        "model", "Default: the server's default model."
    )
    input: SkipValidation[str | list[CreateInputItem] | None] = spec_field(  # type: ignore[assignment]
        "input",
        "Required unless previous_response_id is given. A compaction_trigger item may "
        "only be the last.",
    )
    include: list[Includable] | None = spec_field(  # type: ignore[assignment]
        "include", "Only reasoning.encrypted_content adds to the output here."
    )
    tools: list[Tool] | None = spec_field(  # type: ignore[assignment]
        "tools",
        "Turnpike also takes custom and namespace tools, and hosted tools (echoed, not "
        "run). Names are unique across the request, namespaces included.",
    )
    tool_choice: ToolChoice | None = spec_field(  # type: ignore[assignment]
        "tool_choice",
        "A named tool must be among the function or custom tools given; 'required' needs tools.",
    )
    metadata: SkipValidation[MetadataParam | None] = spec_field("metadata")
    text: TextOptions | None = spec_field("text")  # type: ignore[assignment]
    reasoning: ReasoningOptions | None = spec_field("reasoning")  # type: ignore[assignment]
    temperature: Annotated[float, Between(0.0, 2.0)] | None = spec_field("temperature")
    top_p: Annotated[float, Between(0.0, 1.0)] | None = spec_field("top_p")
    presence_penalty: Annotated[float, Between(-2.0, 2.0)] | None = spec_field("presence_penalty")
    frequency_penalty: Annotated[float, Between(-2.0, 2.0)] | None = spec_field("frequency_penalty")
    top_logprobs: Annotated[int, Between(0, 20, "an integer")] | None = spec_field(
        "top_logprobs", "No backend here returns log probabilities: above 0 is refused."
    )
    background: bool | None = spec_field("background", "Needs 'store' (not false).")

    # Turnpike's own fields.
    conversation: Conversation | None = Field(
        None,
        description="Turnpike: the conversation (/v1/conversations) this response belongs "
        "to: its items come before the input, and the response's are added to it. Not "
        "with previous_response_id.",
    )
    user: str | None = Field(
        None, description="Turnpike: the end user's id (OpenAI's older field)."
    )
    seed: int | None = Field(None, description="Turnpike: a seed for sampling.")
    prompt_cache_retention: Literal["in_memory", "24h"] | None = Field(
        None, description="Turnpike: how long a prompt's cache is kept (a hint)."
    )
    prompt_cache_options: dict[str, Any] | None = Field(
        None, description="Turnpike: cache breakpoints and lifetimes (hints, accepted)."
    )
    context_management: list[CompactionOption] | None = Field(
        None, description="Turnpike: compact the context past a threshold of input tokens."
    )
    client_metadata: SkipValidation[
        Annotated[dict[str, str], Field(max_length=MAX_CLIENT_METADATA_KEYS)] | None
    ] = Field(
        None,
        description="Turnpike: a client's own annotations (Codex: its trace context), "
        "kept, not echoed.",
    )
    generate: bool | None = Field(
        None,
        description="Turnpike: false to prepare the turn without generating (the "
        "WebSocket mode's warm-up). Default true.",
    )
    multi_agent: MultiAgentOption | None = Field(
        None,
        description="Turnpike (beta, WebSocket mode, on a connection opened with OpenAI-Beta: "
        "responses_multi_agent=v1): enabled runs the response as one rollout that waits "
        "for the outputs of its calls, committed by response.inject, and samples on in "
        "the same response. No subagents are hosted: max_concurrent_subagents has no "
        "effect. Over HTTP, or without the beta, enabled: true is refused.",
    )
    prompt: None = _refused("prompt")
    moderation: None = _refused("moderation")
    access_programs: None = _refused("access_programs")
    image: None = _refused("image")


class CompactBody(CreateBody):
    """``POST /v1/responses/compact``: a create body whose ``model`` is required, as the
    spec's ``CompactResponseMethodPublicBody`` and the SDK's ``compact()`` have it."""

    model: Annotated[str, Field(min_length=1)] = Field(
        description="The model that renders and counts the compacted history."
    )


class WebSocketCreateBody(CreateBody):
    """A ``response.create`` over WebSocket, without its ``type``: a create body with a
    lane (``stream_id``); ``stream`` is implied, ``background`` refused."""

    background: bool | None = spec_field(
        "background", "Not supported in WebSocket mode: true is refused."
    )

    stream_id: (
        Annotated[
            str,
            matching(
                STREAM_ID,
                "1-256 characters from A-Z, a-z, 0-9, '_', '.' and '-'",
                "invalid_stream_id",
            ),
        ]
        | None
    ) = Field(
        None,
        description="Turnpike: the lane of this create on the connection; creates on "
        "one lane run in order, lanes side by side.",
    )


class WebSocketResponseCreateEvent(WebSocketCreateBody):
    """The WebSocket client event that starts a response: the spec's event of this name,
    as this server takes it (described in the document; the handler takes ``type`` off
    and validates the rest as a ``WebSocketCreateBody``)."""

    type: Literal["response.create"]
