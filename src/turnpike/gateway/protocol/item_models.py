"""The input items this server takes, as the document states them: the spec's item
models where they describe what is accepted, Turnpike's where it accepts more or less
(custom tool calls, a compaction trigger, any content part in any message, no item
references, no video, files inline only).

Declarations only: ``turnpike.gateway.protocol.items`` validates and normalizes the
items, with its own precise errors, and faster than a union of models (measured in
``bench/results/issue-21-request-models``). ``tests/unit/gateway/test_request_agreement.py``
checks that items generated from these models are accepted.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from turnpike.gateway.protocol.items import MAX_FUNCTION_NAME_CHARS
from turnpike.gateway.protocol.openresponses import (
    CompactionSummaryItemParam,
    FunctionCallItemParam,
    InputTextContentParam,
    OutputTextContentParam,
    ReasoningItemParam,
    RefusalContentParam,
)

ItemId = Annotated[str | None, Field(description="The item's id; one is made when absent.")]
CallId = Annotated[str, Field(description="The call's id, as the model gave it.")]
Namespace = Annotated[
    str | None,
    Field(
        max_length=MAX_FUNCTION_NAME_CHARS,
        description="Turnpike: the namespace tool the called tool belongs to.",
    ),
]


def _one_of_required(*keys: str) -> ConfigDict:
    """At least one of ``keys`` given, and not null (a null is an absent value)."""
    given: list[JsonValue] = [
        {"required": [key], "properties": {key: {"type": "string"}}} for key in keys
    ]
    return ConfigDict(json_schema_extra={"anyOf": given})


class InputImagePart(BaseModel):
    """An image: its URL (or a data URL), or a file's id."""

    model_config = _one_of_required("image_url", "file_id")
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto"] = "auto"


class InputFilePart(BaseModel):
    """A file sent inline: its text goes into the prompt. ``file_data`` is a data URL
    (``data:<mime type>;base64,<data>``), or base64 whose type ``filename``'s extension
    tells: text files (``text/*``, JSON, XML, YAML) and PDFs. This server
    has no Files API and fetches no URLs: ``file_id`` and ``file_url`` are refused."""

    type: Literal["input_file"]
    filename: str | None = None
    file_data: Annotated[str, Field(description="The file, base64-encoded (see above).")]


ContentPart = (
    InputTextContentParam
    | OutputTextContentParam
    | RefusalContentParam
    | InputImagePart
    | InputFilePart
)
Content = str | list[ContentPart]


class MessageItem(BaseModel):
    """A message of any role, with text or any content parts (the spec's per-role
    message items, taken alike). Without ``type``, an object with ``role`` is a message."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: Content
    id: ItemId = None
    status: str | None = None


class FunctionCallItem(FunctionCallItemParam):
    """A function call the model made, sent back as history."""

    namespace: Namespace = None


class FunctionCallOutputItem(BaseModel):
    """The output of a function call: text, or content parts (no video)."""

    type: Literal["function_call_output"]
    call_id: CallId
    output: Content
    id: ItemId = None
    status: str | None = None


class CustomToolCallItem(BaseModel):
    """Turnpike: a custom tool's call (free-form ``input``), sent back as history."""

    type: Literal["custom_tool_call"]
    call_id: CallId
    name: Annotated[str, Field(max_length=MAX_FUNCTION_NAME_CHARS)]
    input: str
    id: ItemId = None
    namespace: Namespace = None
    status: str | None = None


class CustomToolCallOutputItem(BaseModel):
    """Turnpike: the output of a custom tool's call."""

    type: Literal["custom_tool_call_output"]
    call_id: CallId
    output: Content
    id: ItemId = None
    status: str | None = None


class CompactionTriggerItem(BaseModel):
    """Compacts the current context: the response's only output is one compaction item,
    and nothing is generated. Must be the final input item of a create."""

    type: Literal["compaction_trigger"]
    id: ItemId = None


# What a conversation's items and a create's input take (a create's also a trigger).
InputItem = (
    MessageItem
    | FunctionCallItem
    | FunctionCallOutputItem
    | CustomToolCallItem
    | CustomToolCallOutputItem
    | ReasoningItemParam
    | CompactionSummaryItemParam
)
CreateInputItem = InputItem | CompactionTriggerItem
