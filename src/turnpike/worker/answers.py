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

The function calls are written by ``tool_calls``, the plain text by ``pseudo_text``; the
reasoning before the answer (``reasoning.effort``) by ``reasoning``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence

from turnpike.conversation.v1 import conversation_pb2
from turnpike.inference.v1 import inference_pb2
from turnpike.worker.answer_kinds import Answer, AnswerError, MessageAnswer
from turnpike.worker.pseudo_text import VERBOSITY_TOKENS, pseudo_text
from turnpike.worker.schema_instance import generate_arguments
from turnpike.worker.seeded import stable_rng
from turnpike.worker.tool_calls import call_tool, schema_from_json

Item = conversation_pb2.Item
OUTPUT_SNIPPET_CHARS = 200
# A step of a plan: a line that starts "1.", "2)" or "- " / "* ".
_PLAN_STEP = re.compile(r"^\s*(?:\d{1,3}[.)]|[-*])\s+(\S.*)$", re.MULTILINE)
MAX_PLAN_STEPS = 64


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
