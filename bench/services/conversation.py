"""A realistic agent conversation, deterministic for a given size: instructions, eight
function tools, a user message, then ``turns`` rounds of function_call + function_call_output
(about 3 KB of Python source each) with an assistant message every third round.

The source text is sliced from a fixed list of standard-library modules, so the workload
is real code (identifiers, comments, docstrings) and the same on every machine that runs
the same Python version.
"""

from __future__ import annotations

import functools
import json
import random
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from turnpike.conversation.v1.conversation_pb2 import Item, Tool

OUTPUT_CHARS = 3000
ASSISTANT_EVERY = 3

INSTRUCTIONS = (
    "You are a careful coding agent working in a Python repository. Read the code before "
    "you change it, keep changes small, and run the tests after every edit. When a test "
    "fails, read the failure, find the cause in the source, and fix the cause rather than "
    "the symptom. Explain what you changed and why in one short paragraph at the end."
)

_SOURCES = (
    "argparse.py",
    "asyncio/base_events.py",
    "dataclasses.py",
    "functools.py",
    "json/decoder.py",
    "pathlib.py",
    "subprocess.py",
    "typing.py",
)

_TOOL_SPECS = (
    ("read_file", "Read a file of the repository, optionally a range of lines.", ["path"]),
    ("list_dir", "List the entries of a folder of the repository.", ["path"]),
    ("search_code", "Search the repository for a regular expression.", ["pattern"]),
    ("run_tests", "Run pytest on a selector and return its output.", ["selector"]),
    ("write_file", "Replace the contents of a file.", ["path", "content"]),
    ("apply_patch", "Apply a unified diff to the repository.", ["patch"]),
    ("git_diff", "Show the uncommitted changes.", []),
    ("run_command", "Run a shell command in the repository and return its output.", ["command"]),
)


def tools() -> list[Tool]:
    result = []
    for name, description, required in _TOOL_SPECS:
        properties = {arg: {"type": "string", "description": f"The {arg}."} for arg in required}
        if name == "read_file":
            properties["start_line"] = {"type": "integer", "minimum": 1}
            properties["end_line"] = {"type": "integer", "minimum": 1}
        schema = {"type": "object", "properties": properties, "required": required}
        result.append(Tool(name=name, description=description, parameters_json=json.dumps(schema)))
    return result


@functools.cache
def _corpus() -> tuple[str, ...]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return tuple((stdlib / name).read_text(encoding="utf-8") for name in _SOURCES)


def source_slice(rng: random.Random, chars: int = OUTPUT_CHARS) -> tuple[str, str]:
    """(module name, about ``chars`` characters of it starting at a line)."""
    index = rng.randrange(len(_SOURCES))
    text = _corpus()[index]
    start = text.rfind("\n", 0, rng.randrange(max(1, len(text) - chars))) + 1
    end = text.find("\n", start + chars)
    return _SOURCES[index], text[start : end if end > 0 else len(text)]


def turn(index: int, rng: random.Random) -> list[Item]:
    """One agent round: a read_file call and its output, then sometimes a short message."""
    name, source = source_slice(rng)
    call_id = f"call_{index:04d}"
    arguments = json.dumps({"path": f"lib/{name}", "start_line": 1, "end_line": 120})
    items = [
        Item(
            kind=Item.FUNCTION_CALL,
            id=f"fc_{index:04d}",
            call_id=call_id,
            name="read_file",
            arguments=arguments,
        ),
        Item(
            kind=Item.FUNCTION_CALL_OUTPUT,
            id=f"fco_{index:04d}",
            call_id=call_id,
            name="read_file",
            text=source,
        ),
    ]
    if index % ASSISTANT_EVERY == ASSISTANT_EVERY - 1:
        items.append(
            Item(
                kind=Item.MESSAGE,
                id=f"msg_{index:04d}",
                role="assistant",
                text=(
                    f"I read lib/{name}. The function that parses the arguments keeps its "
                    "state in a dictionary and the failing test passes a tuple, so the next "
                    "step is to look at how the caller builds that value before changing it."
                ),
            )
        )
    return items


@dataclass(frozen=True)
class Conversation:
    instructions: str
    tools: list[Tool]
    items: list[Item]  # the whole history, user message first
    last_turn: list[Item]  # the items the latest round added (what an append renders)


def conversation(turns: int, seed: int = 7) -> Conversation:
    rng = random.Random(seed)
    items = [
        Item(
            kind=Item.MESSAGE,
            id="msg_user",
            role="user",
            text=(
                "The test test_parse_args_with_defaults fails since yesterday's refactor. "
                "Find out why and fix it without changing the test."
            ),
        )
    ]
    last: list[Item] = []
    for index in range(turns):
        last = turn(index, rng)
        items += last
    return Conversation(INSTRUCTIONS, tools(), items, last)


@functools.cache
def _renderer():
    from tokenizer.render import Renderer

    return Renderer()


def history_tokens(conv: Conversation) -> int:
    """Tokens of the rendered conversation (the x axis shared by the benchmarks)."""
    return len(_renderer().render(conv.instructions, conv.tools, conv.items))
