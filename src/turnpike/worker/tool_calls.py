"""The simulator's function calls (pure): which tool a request's words ask for (the one
whose name and description share the most of them; when the words quote a command,
among the tools that take one), and input valid for it: arguments for its JSON Schema
(``schema_instance``), or free-form input its grammar accepts (``custom_input``)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from turnpike.conversation.v1 import conversation_pb2
from turnpike.worker.answer_kinds import AnswerError, FunctionCallAnswer
from turnpike.worker.custom_input import custom_tool_input
from turnpike.worker.schema_instance import generate_arguments
from turnpike.worker.seeded import stable_rng
from turnpike.worker.user_text import COMMAND_WORDS, content_words, find_command, name_words


def choose_tool(
    tools: Sequence[conversation_pb2.Tool], choice: str, user_text: str, seed: int
) -> conversation_pb2.Tool:
    named = [t for t in tools if t.name == choice]
    if named:
        return named[0]
    asked = {w.lower() for w in content_words(user_text)}
    if find_command(user_text) is not None:
        # A quoted command is for a tool that runs one, however many words another shares.
        tools = [t for t in tools if takes_command(t.parameters_json)] or tools
    scores = [_shared_words(tool_words(t.name, t.description), asked) for t in tools]
    best = [t for t, s in zip(tools, scores, strict=True) if s == max(scores)]
    return best[stable_rng(seed, "tool", user_text).randrange(len(best))]


# Clients re-send the same tools with every request: their words are read once.
@functools.lru_cache(maxsize=1024)
def tool_words(name: str, description: str) -> frozenset[str]:
    """The words a tool's name and description match a request by."""
    words = set(name_words(name)) | {w.lower() for w in content_words(description)}
    return frozenset(_with_singulars(words))


@functools.lru_cache(maxsize=1024)
def takes_command(parameters_json: str) -> bool:
    """Whether a tool's schema requires a command (``cmd``, ``command``, ``script``...)."""
    try:
        schema = json.loads(parameters_json) if parameters_json.strip() else {}
    except json.JSONDecodeError:
        return False
    required = schema.get("required") if isinstance(schema, dict) else None
    return isinstance(required, list) and any(
        isinstance(k, str) and COMMAND_WORDS & set(name_words(k)) for k in required
    )


def _shared_words(tool: frozenset[str], asked: set[str]) -> int:
    """The asked words a tool's words hold, each once ("files" matches "file")."""
    return sum(w in tool or (w.endswith("s") and w[:-1] in tool) for w in asked)


def _with_singulars(words: set[str]) -> set[str]:
    return words | {w[:-1] for w in words if w.endswith("s")}  # "files" matches "file"


def call_tool(
    tools: Sequence[conversation_pb2.Tool], choice: str, text: str, seed: int
) -> FunctionCallAnswer:
    """A call of the tool ``text`` asks for, filled from ``text``'s words."""
    tool = choose_tool(tools, choice, text, seed)
    if tool.custom:
        return FunctionCallAnswer(tool.name, custom_input(tool, text, seed), custom=True)
    return FunctionCallAnswer(tool.name, tool_arguments(tool, text, seed))


def custom_input(tool: conversation_pb2.Tool, text: str, seed: int) -> str:
    """Input for a custom tool that its format (text, or a grammar) accepts."""
    try:
        fmt = json.loads(tool.format_json) if tool.format_json.strip() else {}
    except json.JSONDecodeError as exc:
        raise AnswerError(f"tool '{tool.name}' has invalid format JSON: {exc}") from exc
    if not isinstance(fmt, dict):
        raise AnswerError(f"tool '{tool.name}' format must be a JSON object")
    try:
        return custom_tool_input(
            str(fmt.get("type") or "text"),
            str(fmt.get("syntax") or ""),
            str(fmt.get("definition") or ""),
            text,
            seed,
        )
    except ValueError as exc:
        raise AnswerError(f"tool '{tool.name}': {exc}") from exc


def tool_arguments(tool: conversation_pb2.Tool, user_text: str, seed: int) -> str:
    schema = parse_schema(tool)
    rng = stable_rng(seed, "arguments", tool.name, user_text)
    value = generate_arguments(schema, user_text, rng)
    return json.dumps(value, ensure_ascii=False)


def parse_schema(tool: conversation_pb2.Tool) -> Any:
    return schema_from_json(tool.parameters_json, f"tool '{tool.name}'", "parameters")


def schema_from_json(text: str, owner: str, field: str) -> Any:
    """A decoded JSON Schema (an empty object schema for no text), or an AnswerError
    naming whose (``owner``) ``field`` it is."""
    if not text.strip():
        return {"type": "object", "properties": {}}
    try:
        schema = json.loads(text)
    except json.JSONDecodeError as exc:
        raise AnswerError(f"{owner} has invalid {field} JSON: {exc}") from exc
    if not isinstance(schema, (dict, bool)):
        raise AnswerError(f"{owner} {field} must be a JSON Schema object")
    return schema
