"""What the simulator says (pure): deterministic given the request and its seed.

It reads the structured conversation, like a model would:

1. ``tool_choice`` is ``"required"`` or names a function: a function call, always
   (as the real API forces a call; clients reset ``tool_choice`` to end a loop).
   ``max_tool_calls`` of 0 outranks it: no call is allowed, so the answer is a message.
   A response holds at most one function call, so ``parallel_tool_calls: false`` and
   any ``max_tool_calls`` of 1 or more always hold.
2. The last item is a tool output: one message that uses the output(s), unless the
   user's message is a plan (below) with steps left.
3. Tools are given and ``tool_choice`` is not ``"none"``: a call to the tool whose
   name and description share the most words with the user's last message; when the
   message quotes a command, among the tools that take one (a required ``cmd``,
   ``command``, ...: "run `git status`" is for the shell tool, not for Codex's
   ``update_goal``, whose description says "run" and "status"); ties broken by the seed. Its arguments are valid for its
   JSON Schema: the required properties and the optional ones the message gives
   (``schema_instance``). A custom tool's call carries free-form input that its grammar
   accepts (``custom_input``).

   A user message that is a plan, a list of two or more steps ("1. run `ls`", "2. add
   notes.md with a patch", or "- " items), is followed like an agent follows one: one
   call per step, in order, each chosen and filled from its step's words, until every
   step has had its call; then the closing message. A scripted multi-step task (the
   Codex benchmark's) is such a message.
4. Otherwise: a short message (about 20 to 60 tokens) of seeded pseudo-text that
   mentions the words of the user's question; when the user asks for a length ("in
   2000 words", "500 tokens"), about that many tokens, so long streams can be tested.
   ``text.verbosity`` sets the length otherwise: low about 8 to 20 tokens, medium (the
   default) 20 to 60, high 60 to 150; after a tool ran, the closing sentences: one
   (low), one or two (medium), three (high).

A message (2. and 4.) follows the request's ``text_format`` (structured outputs):
``json_schema`` -> JSON text valid for the schema, built as tool arguments are
(``schema_instance``, values from the user's words, every declared property filled);
``json_object`` -> a small JSON object, ``{"answer": ...}`` with the pseudo-text as its
value. Function calls are unaffected: a call still wins when tools apply.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from turnpike.conversation.v1 import conversation_pb2
from turnpike.inference.v1 import inference_pb2
from turnpike.worker.custom_input import custom_tool_input
from turnpike.worker.schema_instance import generate_arguments
from turnpike.worker.seeded import stable_rng
from turnpike.worker.user_text import COMMAND_WORDS, content_words, find_command, name_words

Item = conversation_pb2.Item
OUTPUT_SNIPPET_CHARS = 200
MIN_TEXT_TOKENS, MAX_TEXT_TOKENS = 20, 60
# text.verbosity: the length of a plain answer, in tokens (low, high bounds).
VERBOSITY_TOKENS = {"low": (8, 20), "medium": (MIN_TEXT_TOKENS, MAX_TEXT_TOKENS), "high": (60, 150)}
MAX_REQUESTED_TOKENS = 32_768
_LENGTH_REQUEST = re.compile(r"\b(\d{1,6})\s*(?:words|tokens)\b", re.IGNORECASE)
# A step of a plan: a line that starts "1.", "2)" or "- " / "* ".
_PLAN_STEP = re.compile(r"^\s*(?:\d{1,3}[.)]|[-*])\s+(\S.*)$", re.MULTILINE)
MAX_PLAN_STEPS = 64


class AnswerError(ValueError):
    """The request cannot be answered as given (a client error)."""


@dataclass(frozen=True)
class MessageAnswer:
    text: str


@dataclass(frozen=True)
class FunctionCallAnswer:
    name: str
    arguments: str  # JSON text; a custom tool's free-form input
    custom: bool = False


Answer = MessageAnswer | FunctionCallAnswer


def plan_answer(
    items: Sequence[conversation_pb2.Item],
    tools: Sequence[conversation_pb2.Tool],
    tool_choice: str,
    seed: int,
    count_tokens: Callable[[str], int],
    instructions: str = "",
    text_format: inference_pb2.TextFormat | None = None,
    max_tool_calls: int | None = None,
    verbosity: str = "",
) -> Answer:
    choice = tool_choice or "auto"
    verbosity = verbosity or "medium"
    if verbosity not in VERBOSITY_TOKENS:
        raise AnswerError(f"verbosity '{verbosity}' is not one of low, medium, high")
    if max_tool_calls is not None and max_tool_calls < 0:
        raise AnswerError("max_tool_calls must be >= 0")
    if choice not in ("auto", "none", "required") and not any(t.name == choice for t in tools):
        raise AnswerError(f"tool_choice names '{choice}', which is not among the tools")
    if choice == "required" and not tools:
        raise AnswerError("tool_choice is 'required' but no tools are given")
    user_text = last_user_text(items) or instructions
    may_call = bool(tools) and choice != "none" and max_tool_calls != 0
    forced = may_call and choice != "auto"
    kind = text_format.type if text_format is not None else ""
    if kind not in ("", "text", "json_object", "json_schema"):
        raise AnswerError(f"text format type '{kind}' is not one of text, json_object, json_schema")
    after_tool = bool(items) and items[-1].kind == Item.FUNCTION_CALL_OUTPUT
    steps = plan_steps(user_text)
    next_step = calls_since_user(items)
    if steps and may_call and next_step < len(steps):
        return call_tool(tools, choice, steps[next_step], seed)
    if after_tool and not forced:
        if kind in ("json_object", "json_schema"):
            assert text_format is not None  # kind comes from it
            words = " ".join([user_text, *tool_outputs(items)])  # what the answer is made of
            return MessageAnswer(structured_text(text_format, words, seed))
        return MessageAnswer(tool_result_text(items, seed, verbosity))
    if may_call:
        return call_tool(tools, choice, user_text, seed)
    if kind == "json_object":
        return MessageAnswer(json_object_text(user_text, seed, count_tokens))
    if kind == "json_schema":
        assert text_format is not None  # kind comes from it
        return MessageAnswer(structured_text(text_format, user_text, seed))
    return MessageAnswer(pseudo_text(user_text, seed, count_tokens, verbosity))


def plan_steps(user_text: str) -> list[str]:
    """The steps of a plan (two or more list lines), or [] when the text is not one."""
    steps = _PLAN_STEP.findall(user_text)[:MAX_PLAN_STEPS]
    return steps if len(steps) >= 2 else []


def calls_since_user(items: Sequence[conversation_pb2.Item]) -> int:
    """Tool calls made since the last user message: the plan's steps already taken."""
    calls = 0
    for item in reversed(items):
        if item.kind == Item.MESSAGE and item.role == "user":
            break
        calls += item.kind == Item.FUNCTION_CALL
    return calls


def last_user_text(items: Sequence[conversation_pb2.Item]) -> str:
    for item in reversed(items):
        if item.kind == Item.MESSAGE and item.role == "user":
            return item.text
    return ""


def collapse(text: str) -> str:
    return " ".join(text.split())


# -- after a tool ran ------------------------------------------------------------------

_CLOSERS = (
    "Based on that result, the request is handled.",
    "That answers the question; let me know if you need more detail.",
    "I used that output to complete the task.",
    "Everything needed is in that result, so I will stop here.",
    "If you want, I can run another tool to check further.",
    "That looks consistent with what you asked for.",
)


def tool_outputs(items: Sequence[conversation_pb2.Item]) -> list[str]:
    """The texts of the trailing tool outputs, in order."""
    return [o.text for o in _trailing_outputs(items)]


def _trailing_outputs(items: Sequence[conversation_pb2.Item]) -> list[conversation_pb2.Item]:
    outputs: list[conversation_pb2.Item] = []
    for item in reversed(items):
        if item.kind != Item.FUNCTION_CALL_OUTPUT:
            break
        outputs.insert(0, item)
    return outputs


def tool_result_text(
    items: Sequence[conversation_pb2.Item], seed: int, verbosity: str = "medium"
) -> str:
    """One line per trailing tool output, then a closing sentence."""
    outputs = _trailing_outputs(items)
    lines = []
    for output in outputs:
        text = collapse(output.text)
        snippet = text[:OUTPUT_SNIPPET_CHARS] + ("..." if len(text) > OUTPUT_SNIPPET_CHARS else "")
        lines.append(f"The tool returned: {snippet}" if snippet else "The tool returned nothing.")
    rng = stable_rng(seed, "after-tool", *(o.text for o in outputs))
    count = {"low": 1, "high": 3}.get(verbosity) or 1 + rng.randrange(2)
    closers = rng.sample(_CLOSERS, k=count)
    return "\n".join(lines) + "\n" + " ".join(closers)


# -- calling a tool --------------------------------------------------------------------


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


# -- structured outputs ----------------------------------------------------------------


def structured_text(text_format: inference_pb2.TextFormat, user_text: str, seed: int) -> str:
    """JSON text valid for the format's schema, its values from ``user_text``."""
    schema = schema_from_json(
        text_format.schema_json, f"text format '{text_format.name}'", "schema"
    )
    rng = stable_rng(seed, "structured", text_format.name, user_text)
    value = generate_arguments(schema, user_text, rng, all_properties=True)
    return json.dumps(value, ensure_ascii=False)


def json_object_text(user_text: str, seed: int, count_tokens: Callable[[str], int]) -> str:
    """A small JSON object: the pseudo-text answer under ``"answer"``."""
    return json.dumps({"answer": pseudo_text(user_text, seed, count_tokens)}, ensure_ascii=False)


# -- plain text ------------------------------------------------------------------------

_OPENERS = (
    "You asked about {topic}.",
    "Here is a short answer about {topic}.",
    "Good question about {topic}.",
    "Let me address {topic}.",
)
_GENERIC_OPENERS = (
    "Hello! This is the Turnpike simulator.",
    "Here is a short answer.",
    "Thanks for the message.",
)
_SENTENCES = (
    "In short, {w} depends mostly on the context you provide.",
    "The key point about {w} is that it is simpler than it first looks.",
    "Most people start with {w} and refine the details later.",
    "A careful look at {w} usually answers the question.",
    "There are a few ways to think about {w}, and each one has trade-offs.",
    "If you share more about {w}, I can give a more precise answer.",
    "This reply is simulated, so treat the details as placeholders.",
    "The simulator keeps answers short and deterministic.",
    "Every token here is paced at the configured model speed.",
    "That is the gist of it.",
)


def requested_length(user_text: str) -> int | None:
    """Tokens the user asked for ("in 2000 words"), if any."""
    match = _LENGTH_REQUEST.search(user_text)
    if match is None:
        return None
    return max(1, min(int(match.group(1)), MAX_REQUESTED_TOKENS))


def long_text(
    opening: str,
    words: list[str],
    target: int,
    rng: random.Random,
    count_tokens: Callable[[str], int],
) -> str:
    """Sentences until about ``target`` tokens, counted per sentence (a whole-text count
    on every step would be quadratic)."""
    parts, total = [opening], count_tokens(opening)
    while total < target:
        sentence = " " + rng.choice(_SENTENCES).format(w=rng.choice(words) if words else "this")
        parts.append(sentence)
        total += count_tokens(sentence)
    return "".join(parts)


def pseudo_text(
    user_text: str, seed: int, count_tokens: Callable[[str], int], verbosity: str = "medium"
) -> str:
    low, high = VERBOSITY_TOKENS[verbosity]
    words = content_words(user_text)
    rng = stable_rng(seed, "text", user_text)
    requested = requested_length(user_text)
    target = requested or rng.randint(low, high)
    if words:
        topic = " and ".join(words[:2]) if len(words) > 1 else words[0]
        text = rng.choice(_OPENERS).format(topic=topic)
    else:
        text = rng.choice(_GENERIC_OPENERS)
    if requested is not None and requested > high:
        return long_text(text, words, target, rng, count_tokens)
    used = {text}
    length = count_tokens(text)
    while length < target:
        sentence = rng.choice(_SENTENCES).format(w=rng.choice(words) if words else "this")
        if sentence in used and len(used) < len(_SENTENCES):
            continue
        candidate = text + " " + sentence
        candidate_length = count_tokens(candidate)  # counted once: the next length if kept
        if length >= low and candidate_length > high:
            break
        used.add(sentence)
        text, length = candidate, candidate_length
    return text


# Reasoning (``reasoning.effort``): tokens of thought before the answer, a base times
# the effort's factor, deterministic per seed.
REASONING_BASE_TOKENS = 32
REASONING_FACTORS = {"minimal": 0.5, "low": 1, "medium": 2, "high": 4, "xhigh": 8}
_REASONING_OPENERS = (
    "The user asks about {topic}. Let me think about what matters here.",
    "We need to answer a question on {topic}. First, what is being asked?",
    "Question concerns {topic}. Let's work out the key points.",
)
_GENERIC_REASONING_OPENER = "We need to reply to the user. Let's consider what they want."


@dataclass(frozen=True)
class Reasoning:
    text: str
    summary: str  # "" when no summary was asked for


def plan_reasoning(
    items: Sequence[conversation_pb2.Item],
    effort: str,
    summary: str,
    seed: int,
    count_tokens: Callable[[str], int],
    instructions: str = "",
) -> Reasoning | None:
    """The reasoning before the answer, or None when no effort is asked for."""
    if not effort or effort == "none":
        return None
    factor = REASONING_FACTORS.get(effort)
    if factor is None:
        raise AnswerError(f"reasoning.effort '{effort}' is not one of {sorted(REASONING_FACTORS)}")
    user_text = last_user_text(items) or instructions
    words = content_words(user_text)
    rng = stable_rng(seed, "reasoning", effort, user_text)
    if words:
        topic = " and ".join(words[:2]) if len(words) > 1 else words[0]
        opening = rng.choice(_REASONING_OPENERS).format(topic=topic)
    else:
        topic, opening = "the request", _GENERIC_REASONING_OPENER
    text = long_text(opening, words, int(REASONING_BASE_TOKENS * factor), rng, count_tokens)
    brief = ""
    if summary:
        sentences = 2 if summary == "detailed" else 1
        body = " ".join(text.split(". ")[:sentences]).rstrip(".") + "."
        brief = f"**Considering {topic}**\n\n{body}"
    return Reasoning(text, brief)
