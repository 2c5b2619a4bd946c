"""Conversation items -> harmony messages -> o200k tokens (gpt-oss format). No gRPC here.

A rendered conversation is the system message, an optional developer message, then one harmony
message per item, concatenated. Each message is rendered on its own, as ``encoding.render`` renders
it (an item's message by frame, see ``Renderer``): that is exactly what harmony's
``render_conversation`` does for the messages we produce (we never emit ``analysis`` messages, the
only thing it drops), and it is what makes appending sound::

    render(I, T, items[:k]) + render_append(items[k:]) == render(I, T, items)   for every k

Mapping of items (the choices harmony leaves to us are marked *):

- MESSAGE user -> ``user`` message.
- MESSAGE system / developer (*) -> ``developer`` message with the text. In harmony the system
  message is the serving stack's model configuration (identity, reasoning effort, channels); what
  Responses API clients call system or developer instructions are the developer's role.
- MESSAGE assistant -> ``assistant`` message on channel ``final``.
- FUNCTION_CALL -> ``assistant`` message on channel ``commentary`` to ``functions.<name>``,
  content type ``<|constrain|>json``, content = the arguments text as given. A custom tool's
  call (``custom``) has no content type: its input is free-form text.
- A custom tool (*) is described as a function without parameters whose description ends
  with its input format (the grammar, when it has one).
- FUNCTION_CALL_OUTPUT -> ``tool`` message from ``functions.<name>`` to ``assistant`` on channel
  ``commentary``. (*) Without a name it comes from ``functions.unknown``: the name is resolved
  from the item alone, never from an earlier FUNCTION_CALL in the request, because a lookup
  across items would render the same item differently in a full render and in an append.
- Images (*) are not rendered: gpt-oss is a text model; image cost is the image service's job.

Text that spells special tokens (``<|end|>``) is encoded as plain text by harmony, so item text
cannot forge message boundaries.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

from openai_harmony import (
    Author,
    Conversation,
    DeveloperContent,
    HarmonyEncoding,
    HarmonyError,
    Message,
    ReasoningEffort,
    RenderOptions,
    Role,
    SystemContent,
    ToolDescription,
)

from turnpike import custom_tools
from turnpike.conversation.v1.conversation_pb2 import Item, Tool
from turnpike.token_pieces import encode_in_pieces, longest_word
from turnpike.vocab import harmony_encoding, plain_encoding

# The system message is fixed (harmony's gpt-oss defaults, pinned here so a library upgrade
# cannot silently change renders) and has no conversation date: renders must be reproducible.
MODEL_IDENTITY = "You are ChatGPT, a large language model trained by OpenAI."
KNOWLEDGE_CUTOFF = "2024-06"
REASONING_EFFORT = ReasoningEffort.MEDIUM
CHANNELS = ["analysis", "commentary", "final"]

UNKNOWN_FUNCTION = "unknown"
# Longest stretch without a word boundary in a tool's description or schema (harmony
# encodes these whole: 1,024 characters of the worst case take about 2 ms).
MAX_TOOL_WORD = 1024
# Instructions longer than this are rendered around a marker (Renderer._developer_tokens).
LONG_INSTRUCTIONS = 4096
INSTRUCTIONS_MARKER = "\u2063turnpike-instructions\u2063"

_MESSAGE_ROLES = {"user", "assistant", "system", "developer"}
# Frames kept per renderer: one per message role, and one per function name for calls and
# for outputs.
FRAMES_CACHED = 4096


class RenderError(ValueError):
    """The request cannot be rendered (invalid items or tools); the message says why, and
    ``param`` names the request field at fault when it is known (``tools[1].description``)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def system_content() -> SystemContent:
    return (
        SystemContent.new()
        .with_model_identity(MODEL_IDENTITY)
        .with_reasoning_effort(REASONING_EFFORT)
        .with_knowledge_cutoff(KNOWLEDGE_CUTOFF)
        .with_required_channels(list(CHANNELS))
    )


def _describe(index: int, item: Item) -> str:
    return f"items[{index}]" + (f" (id {item.id!r})" if item.id else "")


def tool_description(index: int, tool: Tool) -> ToolDescription:
    if not tool.name:
        raise RenderError(f"tools[{index}]: a function tool needs a name", f"tools[{index}].name")
    texts = (("description", tool.description), ("parameters", tool.parameters_json))
    for field, text in (*texts, ("format", tool.format_json)):
        # Harmony encodes tool text whole, in time that grows with the square of a word.
        if (run := longest_word(text)) > MAX_TOOL_WORD:
            raise RenderError(
                f"tools[{index}] ({tool.name!r}): its {field} holds {run} characters without "
                f"a word boundary; the limit is {MAX_TOOL_WORD}",
                f"tools[{index}].{field}",
            )
    if tool.custom:
        text = custom_tools.describe(tool.description, tool.format_json)
        return ToolDescription.new(tool.name, text, parameters=None)
    parameters = None
    if tool.parameters_json.strip():
        try:
            parameters = json.loads(tool.parameters_json)
        except json.JSONDecodeError as exc:
            raise RenderError(
                f"tools[{index}] ({tool.name!r}): parameters_json is not valid JSON: {exc}",
                f"tools[{index}].parameters",
            ) from None
        if not isinstance(parameters, dict):
            raise RenderError(
                f"tools[{index}] ({tool.name!r}): parameters_json must be a JSON object (a schema)",
                f"tools[{index}].parameters",
            )
    return ToolDescription.new(tool.name, tool.description, parameters=parameters)


def developer_message(instructions: str, tools: Sequence[Tool]) -> Message | None:
    """The developer message, or None when there are neither instructions nor tools."""
    if not instructions and not tools:
        return None
    developer = DeveloperContent.new()
    if instructions:
        developer = developer.with_instructions(instructions)
    if tools:
        developer = developer.with_function_tools(
            [tool_description(i, tool) for i, tool in enumerate(tools)]
        )
    return Message.from_role_and_content(Role.DEVELOPER, developer)


# What an item's harmony header depends on: its kind, its role (messages) and its function's
# name (calls and outputs). Items of one shape render alike but for their text. A custom
# tool's call has CUSTOM in the role's place.
Shape = tuple[int, str, str]
CUSTOM = "custom"


def item_shape(index: int, item: Item) -> Shape:
    """The item's shape; RenderError for an item that cannot be rendered."""
    if item.kind == Item.MESSAGE:
        if item.role not in _MESSAGE_ROLES:
            raise RenderError(
                f"{_describe(index, item)}: unknown message role {item.role!r} "
                "(expected user, assistant, system or developer)"
            )
        return Item.MESSAGE, item.role, ""
    if item.kind == Item.FUNCTION_CALL:
        if not item.name:
            raise RenderError(f"{_describe(index, item)}: a function_call needs a name")
        return Item.FUNCTION_CALL, CUSTOM if item.custom else "", item.name
    if item.kind == Item.FUNCTION_CALL_OUTPUT:
        return Item.FUNCTION_CALL_OUTPUT, "", item.name or UNKNOWN_FUNCTION
    raise RenderError(f"{_describe(index, item)}: unknown item kind {item.kind}")


def item_text(item: Item) -> str:
    """The text an item's message holds: a call's arguments, anything else's text."""
    return item.arguments if item.kind == Item.FUNCTION_CALL else item.text


def shaped_message(shape: Shape, text: str) -> Message:
    """The harmony message of an item of ``shape`` holding ``text``."""
    kind, role, name = shape
    if kind == Item.MESSAGE:
        if role == "user":
            return Message.from_role_and_content(Role.USER, text)
        if role == "assistant":
            return Message.from_role_and_content(Role.ASSISTANT, text).with_channel("final")
        return Message.from_role_and_content(Role.DEVELOPER, text)
    if kind == Item.FUNCTION_CALL:
        call = (
            Message.from_role_and_content(Role.ASSISTANT, text)
            .with_channel("commentary")
            .with_recipient(f"functions.{name}")
        )
        return call if role == CUSTOM else call.with_content_type("<|constrain|>json")
    return (
        Message.from_author_and_content(Author.new(Role.TOOL, f"functions.{name}"), text)
        .with_recipient("assistant")
        .with_channel("commentary")
    )


def item_message(index: int, item: Item) -> Message:
    """The harmony message for one item; depends on that item only (see module docstring)."""
    return shaped_message(item_shape(index, item), item_text(item))


def item_messages(items: Sequence[Item]) -> list[Message]:
    return [item_message(i, item) for i, item in enumerate(items)]


def text_size(instructions: str, tools: Sequence[Tool], items: Sequence[Item]) -> int:
    """Characters a render has to encode, to decide whether it is worth a worker thread."""
    size = len(instructions)
    size += sum(
        len(t.name) + len(t.description) + len(t.parameters_json) + len(t.format_json)
        for t in tools
    )
    size += sum(len(it.text) + len(it.arguments) for it in items)
    return size


class Renderer:
    """Renders requests with one harmony encoding. Thread-safe (it only reads the encoding;
    its cache of frames is thread-safe).

    Items are rendered by frame: harmony renders a text message as its header, the text
    encoded as plain text, and one closing token (``<|end|>``, or ``<|call|>`` for a call).
    The tokens around the text depend only on the item's shape, so they are rendered by
    harmony once per shape (each harmony render re-encodes its formatting tokens, a fixed cost
    larger than encoding a short text) and checked against a whole render when they are made;
    per item only its text is encoded."""

    def __init__(self, encoding: HarmonyEncoding | None = None) -> None:
        self.encoding = encoding or harmony_encoding()
        # Text is encoded as harmony encodes message text, by tiktoken (turnpike.vocab).
        self._plain = plain_encoding()
        empty = Conversation.from_messages([])
        self.completion_prompt: list[int] = self.encoding.render_conversation_for_completion(
            empty, Role.ASSISTANT
        )
        self._system_tokens = functools.cache(self._render_system)
        # Render both system variants now, so the first request pays nothing extra.
        self._system_tokens(False)
        self._system_tokens(True)
        self._frames = functools.lru_cache(maxsize=FRAMES_CACHED)(self._frame)
        self._message_token = self.encoding.encode("<|message|>", allowed_special="all")[0]

    def _render_system(self, has_function_tools: bool) -> tuple[int, ...]:
        message = Message.from_role_and_content(Role.SYSTEM, system_content())
        options = RenderOptions(conversation_has_function_tools=has_function_tools)
        return tuple(self.encoding.render(message, options))

    def _render_message(self, message: Message, where: str) -> list[int]:
        try:
            return self.encoding.render(message)
        except HarmonyError as exc:
            raise RenderError(f"{where}: cannot be rendered: {exc}") from None

    def _frame(self, shape: Shape) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The tokens before and after the text of a message of ``shape``."""
        empty = self.encoding.render(shaped_message(shape, ""))
        head, tail = empty[:-1], empty[-1:]
        # A harmony whose layout differs would render wrong tokens here: fail loudly instead.
        probe = "Probe text, <|end|> included."
        if self.encoding.render(shaped_message(shape, probe)) != head + self.encode(probe) + tail:
            raise RuntimeError(f"harmony renders {shape} otherwise than header, text, end")
        return tuple(head), tuple(tail)

    def encode(self, text: str) -> list[int]:
        """Plain text as tokens; text that spells a special token is the text it is (as harmony
        encodes message text)."""
        # Long text in pieces the encoder handles in bounded time (turnpike.token_pieces).
        return encode_in_pieces(self._encode_whole, text)

    def _encode_whole(self, text: str) -> list[int]:
        return self._plain.encode_ordinary(text)

    def render(self, instructions: str, tools: Sequence[Tool], items: Sequence[Item]) -> list[int]:
        """The conversation body: system, developer (if any), every item. No completion prompt."""
        # Harmony states in the system message that function calls go to the commentary
        # channel when the developer message declares function tools.
        body = self.render_append(items)
        tokens = list(self._system_tokens(bool(tools)))
        return tokens + self._developer_tokens(instructions, tools) + body

    def _developer_tokens(self, instructions: str, tools: Sequence[Tool]) -> list[int]:
        """The developer message. Harmony encodes its text whole, in time that grows with
        the square of a word's length, so long instructions are rendered around a marker
        and put in its place as text encoded in pieces (turnpike.token_pieces); the result
        is checked to be what harmony renders (tests/unit/tokenizer/test_tokenizer_render.py)."""
        developer = developer_message(instructions, tools)
        if developer is None:
            return []
        if len(instructions) <= LONG_INSTRUCTIONS:
            return self._render_message(developer, "instructions and tools")
        marked = developer_message(INSTRUCTIONS_MARKER, tools)
        assert marked is not None  # the marker is instructions
        framed = self._render_message(marked, "instructions and tools")
        start = framed.index(self._message_token) + 1
        head, middle, tail = framed[:start], framed[start:-1], framed[-1:]
        text = self.encoding.decode(middle)
        if text.count(INSTRUCTIONS_MARKER) != 1 or self.encode(text) != middle:
            return self._render_message(developer, "instructions and tools")  # not framed
        return head + self.encode(text.replace(INSTRUCTIONS_MARKER, instructions)) + tail

    def render_append(self, items: Sequence[Item]) -> list[int]:
        """Only ``items``, as they continue a conversation already rendered."""
        shapes = [item_shape(i, item) for i, item in enumerate(items)]  # all checked first
        tokens: list[int] = []
        for i, (item, shape) in enumerate(zip(items, shapes, strict=True)):
            try:
                head, tail = self._frames(shape)
            except HarmonyError as exc:
                raise RenderError(f"{_describe(i, item)}: cannot be rendered: {exc}") from None
            tokens += head
            tokens += self.encode(item_text(item))
            tokens += tail
        return tokens

    def count_text(self, text: str) -> int:
        return len(self.encode(text))
