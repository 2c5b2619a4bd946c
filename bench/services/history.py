"""The service benchmarks' workload: the agent loop's rollout (``bench/loop/rollout.py``),
as the protos the services take.

``conversation(rounds)`` is what the gateway holds when the loop sends its request after
``rounds`` tool calls: instructions, eight function tools, the task, then per round the
model's function call (the simulator's own choice, ``turnpike.worker.answers``, as in a live run),
the tool's output (~4 KB of this repository's source) and the user's nudge (none after
the last call: the loop's last request). The last round's items are what a follow-up
appends. Deterministic for a given checkout.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any

from bench.loop.rollout import DEFAULT_OUTPUT_CHARS, Rollout, repo_corpus
from turnpike.conversation.v1.conversation_pb2 import Item, Tool
from turnpike.vocab import harmony_encoding
from turnpike.worker.answer_kinds import FunctionCallAnswer
from turnpike.worker.answers import plan_answer

OUTPUT_CHARS = DEFAULT_OUTPUT_CHARS
# Fixed, so every run sends the same instructions (the loop's runs differ on purpose).
RUN_ID = "bench-services"
SEED = 1


@dataclass(frozen=True)
class Conversation:
    instructions: str
    tools: list[Tool]
    items: list[Item]  # the whole history, the task first
    last_turn: list[Item]  # the items the latest round added (what an append renders)


@functools.cache
def _corpus(output_chars: int) -> dict[str, str]:
    return repo_corpus(min_chars=3 * output_chars)


def _rollout(turns: int, output_chars: int = OUTPUT_CHARS) -> Rollout:
    return Rollout(RUN_ID, _corpus(output_chars), turns=turns, output_chars=output_chars)


def _tool(spec: dict[str, Any]) -> Tool:
    return Tool(
        name=spec["name"],
        description=spec["description"],
        parameters_json=json.dumps(spec["parameters"]),
    )


def _item(raw: dict[str, Any], item_id: str, call_name: str = "") -> Item:
    """One of the rollout's input items (a user message or a tool output)."""
    if raw["type"] == "message":
        return Item(kind=Item.MESSAGE, id=item_id, role=raw["role"], text=raw["content"])
    return Item(
        kind=Item.FUNCTION_CALL_OUTPUT,
        id=item_id,
        call_id=raw["call_id"],
        name=call_name,
        text=raw["output"],
    )


def _count_tokens(text: str) -> int:
    return len(harmony_encoding().encode(text, allowed_special=set(), disallowed_special=()))


def _model_call(rollout: Rollout, tools: list[Tool], items: list[Item], turn: int) -> Item:
    answer = plan_answer(items, tools, "auto", SEED, _count_tokens, rollout.instructions)
    if not isinstance(answer, FunctionCallAnswer):
        raise RuntimeError(f"the simulator answered turn {turn} without a tool call")
    return Item(
        kind=Item.FUNCTION_CALL,
        id=f"fc_{turn:04d}",
        call_id=f"call_{turn:04d}",
        name=answer.name,
        arguments=answer.arguments,
    )


def conversation(rounds: int) -> Conversation:
    rollout = _rollout(turns=rounds + 1)
    tools = [_tool(spec) for spec in rollout.tools]
    items = [_item(raw, "msg_task") for raw in rollout.first_input()]
    last: list[Item] = []
    for turn in range(1, rounds + 1):
        call = _model_call(rollout, tools, items, turn)
        sent = rollout.follow_up_input(turn + 1, call.call_id, call.name)
        last = [call, *(_item(raw, f"in_{turn:04d}_{i}", call.name) for i, raw in enumerate(sent))]
        items = [*items, *last]
    return Conversation(rollout.instructions, tools, items, last)


def tool_outputs(count: int, chars: int) -> list[str]:
    """``count`` tool outputs of about ``chars`` characters, as the loop's tools return
    them."""
    rollout = _rollout(turns=count + 1, output_chars=chars)
    return [rollout.tool_output(turn, "read_file") for turn in range(2, count + 2)]


@functools.cache
def _renderer():
    from turnpike.tokenizer.render import Renderer

    return Renderer()


def history_tokens(conv: Conversation) -> int:
    """Tokens of the rendered conversation (the x axis shared by the benchmarks)."""
    return len(_renderer().render(conv.instructions, conv.tools, conv.items))
