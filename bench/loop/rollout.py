"""A scripted, Codex-like agent rollout (pure: no network, no clock).

One rollout is what a coding agent sends over a whole task:

- instructions (about 1.5 KB, with a unique run id, so two runs never share a worker's
  prefix cache: each gets what a real conversation gets, warm within itself, cold at
  its start) and eight function tools with JSON Schemas, re-sent with every request
  as real clients do;
- turn 1: the user's task; the model answers with a function call;
- turns 2..N-1: the output of the tool the model called (a few kilobytes of this
  repository's own source text), then a short user nudge;
- turn N: the last tool output alone; the model answers with a message and the loop ends.

Why the nudge: the simulator (``src/turnpike/worker/answers.py``) answers a conversation that
ends with a function_call_output with an assistant message, never another call, whereas
a real model keeps calling tools. A user message after the tool output ("Now search the
code for ...") makes the simulator choose the next tool from its words, so every turn
but the last is a tool call, and the tool differs turn to turn. The nudge is small
(about 20 tokens) next to the tool output (about 800), so it hardly changes the work.

Tool outputs are deterministic slices of a given corpus (``repo_corpus()`` reads this
repository's Python sources), so every variant of a run sends the same bytes.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_OUTPUT_CHARS = 4000

INSTRUCTIONS = """\
You are a coding agent working in the user's repository through the tools below. You and
the user share the same workspace; the user sees the tool calls you make.

How you work:
- Read before you write. Open the files that matter, search for the symbols involved, and
  understand how the pieces connect before proposing a change.
- Keep changes minimal and focused on the task. Do not reformat code you did not change, do
  not rename things for taste, and do not add dependencies.
- Fix causes, not symptoms: when a test fails, read the failure, find the line that is
  wrong, and change that line. Never edit a test to make it pass unless the test is wrong.
- After every edit, run the tests that cover it. If they fail, read the output and iterate.
- Use apply_patch for edits: a unified diff against the current file contents, with enough
  context lines to apply cleanly. Use write_file only for new files.
- Shell commands run in a sandbox without network access; prefer the dedicated tools over
  run_command when one fits.
- Tool outputs can be long; quote only the lines you need when you explain something.

When you are done, answer with a short summary: what was wrong, what you changed, and how
you verified it. Mention anything you could not verify. Be concise and concrete: file
names, function names and test names rather than general statements.
"""

TASK = (
    "Follow-up requests that continue a conversation with previous_response_id sometimes "
    "fail with previous_response_not_found right after the gateway restarts. Find out why "
    "in the gateway's store and state modules, fix the cause, and run the tests."
)

# One nudge per follow-up turn, cycled: each names what the agent does next, so the
# simulator picks a different tool (it matches the words against tool names and
# descriptions).
NUDGES = (
    "Now list the folder entries of the gateway package.",
    "Next, read the file lines that load a stored response.",
    "Search the code for a regular expression matching previous_response_id.",
    "Run the tests with pytest on the gateway selector and return the output.",
    "Read the file lines of the state module next.",
    "Search the code for where the response store is created.",
    "Apply a unified diff patch to the repository that fixes the lookup.",
    "Show the uncommitted changes with git diff.",
    "Run a shell command that prints the configured store path.",
    "Read the file lines of the store module around the chain lookup.",
    "Run the tests with pytest again on the gateway selector.",
    "List the folder entries of the tests folder.",
)


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]):
    return {
        "type": "function",
        "name": name,
        "description": description,
        "parameters": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
        "strict": False,
    }


TOOLS: list[dict[str, Any]] = [
    _tool(
        "read_file",
        "Read a file of the repository and return its lines, optionally only a range of lines.",
        {
            "path": {"type": "string", "description": "Path relative to the repository root."},
            "start_line": {"type": "integer", "minimum": 1, "description": "First line (1-based)."},
            "end_line": {"type": "integer", "minimum": 1, "description": "Last line, inclusive."},
        },
        ["path"],
    ),
    _tool(
        "list_dir",
        "List the entries of a folder of the repository, with sizes.",
        {
            "path": {"type": "string", "description": "Folder relative to the repository root."},
            "depth": {"type": "integer", "minimum": 1, "maximum": 3},
        },
        ["path"],
    ),
    _tool(
        "search_code",
        "Search the repository for a regular expression and return matching lines with paths.",
        {
            "pattern": {"type": "string", "description": "A Python regular expression."},
            "glob": {"type": "string", "description": "Only files matching this glob."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 200},
        },
        ["pattern"],
    ),
    _tool(
        "run_tests",
        "Run pytest on a selector and return its output.",
        {
            "selector": {"type": "string", "description": "A pytest node id or path."},
            "timeout_s": {"type": "integer", "minimum": 1, "maximum": 600},
        },
        ["selector"],
    ),
    _tool(
        "apply_patch",
        "Apply a unified diff patch to the repository.",
        {"patch": {"type": "string", "description": "The unified diff."}},
        ["patch"],
    ),
    _tool(
        "write_file",
        "Create a new file, or replace the contents of a file.",
        {
            "path": {"type": "string", "description": "Path relative to the repository root."},
            "content": {"type": "string", "description": "The whole new contents."},
        },
        ["path", "content"],
    ),
    _tool(
        "git_diff",
        "Show the uncommitted changes as a diff.",
        {"paths": {"type": "array", "items": {"type": "string"}}},
        [],
    ),
    _tool(
        "run_command",
        "Run a shell command in the repository sandbox and return its output.",
        {
            "command": {"type": "string", "description": "The command line."},
            "workdir": {"type": "string", "description": "Folder to run it in."},
        },
        ["command"],
    ),
]


# The longest string argument a forced call may write (and the largest integer). A base model constrained to a
# call's JSON fills a string until something ends it; the server's grammar follows
# maxLength, so the call ends, as a real model's short arguments would.
MAX_ARGUMENT_CHARS = 48
# And the most tokens a forced call may take (its JSON, bounded strings and all).
MAX_CALL_TOKENS = 256


def bounded(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``tools`` with every string (and array of strings) argument bounded."""
    out = copy.deepcopy(tools)
    for tool in out:
        for prop in tool["parameters"]["properties"].values():
            if prop.get("type") == "string":
                prop["maxLength"] = MAX_ARGUMENT_CHARS
            elif prop.get("type") == "integer":
                prop.setdefault("maximum", 9999)  # a number, not a run of digits
            elif prop.get("type") == "array":
                prop["maxItems"] = 2
                prop["items"]["maxLength"] = MAX_ARGUMENT_CHARS
    return out


def repo_corpus(
    root: Path = REPO_ROOT, min_chars: int = 3 * DEFAULT_OUTPUT_CHARS
) -> dict[str, str]:
    """This repository's Python sources (generated stubs left out), path -> text, in path
    order. Read once per benchmark run, so every variant gets the same text."""
    files = sorted(
        p for p in (root / "src").rglob("*.py") if "_pb2" not in p.name and "egg-info" not in str(p)
    )
    texts = {str(p.relative_to(root)): p.read_text(encoding="utf-8") for p in files}
    # Files long enough for a slice of the usual size, so no output repeats itself.
    return {path: text for path, text in texts.items() if len(text) >= min_chars} or texts


def _stable(*parts: object) -> int:
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


@dataclass(frozen=True)
class Rollout:
    """The scripted client side of one agent loop. ``turns`` requests in all: the first
    with the task, ``turns - 1`` follow-ups with tool outputs (so ``turns - 1`` tool calls)."""

    run_id: str
    corpus: dict[str, str]
    turns: int = 25
    output_chars: int = DEFAULT_OUTPUT_CHARS
    # Every turn, the last too, ends in a call the request makes the model make
    # (tool_choice "required"), and the loop ends at the last call: for a model that
    # calls tools only when made to (a base model whose server constrains a call with a
    # grammar). Off, the model chooses, and the last turn is its answer.
    calls_only: bool = False
    instructions: str = field(init=False)
    tools: list[dict[str, Any]] = field(init=False)

    def __post_init__(self) -> None:
        if self.turns < 2:
            raise ValueError("a rollout needs at least 2 turns (a call and its output)")
        if not self.corpus:
            raise ValueError("the corpus is empty")
        header = (
            f"Session {self.run_id}. Workspace: /workspace/turnpike (a Python 3.11 project).\n\n"
        )
        object.__setattr__(self, "instructions", header + INSTRUCTIONS)
        object.__setattr__(self, "tools", bounded(TOOLS) if self.calls_only else TOOLS)
        _ = self._slices  # sliced now, never inside a timed loop

    # -- what the client sends ----------------------------------------------------------

    def request_options(self) -> dict[str, Any]:
        """What every request of the loop carries beside its input."""
        options: dict[str, Any] = {"instructions": self.instructions, "tools": self.tools}
        if self.calls_only:
            options |= {
                "tool_choice": "required",
                "parallel_tool_calls": False,
                "max_output_tokens": MAX_CALL_TOKENS,
                # Greedy: at 1.0 a base model pads a call with runs of white space.
                "temperature": 0,
            }
        return options

    def first_input(self) -> list[dict[str, Any]]:
        return [{"type": "message", "role": "user", "content": TASK}]

    def nudge(self, turn: int) -> str | None:
        """The user message after the tool output of ``turn`` (2-based), None on the last."""
        if turn >= self.turns:
            return None
        return NUDGES[(turn - 2) % len(NUDGES)]

    def follow_up_input(self, turn: int, call_id: str, name: str) -> list[dict[str, Any]]:
        """Turn ``turn``'s new items (2 <= turn <= turns): the output of the call the model
        made in the turn before, then the nudge (except on the last turn)."""
        if not 2 <= turn <= self.turns:
            raise ValueError(f"turn {turn} is outside 2..{self.turns}")
        items: list[dict[str, Any]] = [
            {
                "type": "function_call_output",
                "call_id": call_id,
                "output": self.tool_output(turn, name),
            }
        ]
        if (text := self.nudge(turn)) is not None:
            items.append({"type": "message", "role": "user", "content": text})
        return items

    def tool_output(self, turn: int, name: str) -> str:
        """What "running" the tool returns: about ``output_chars`` characters of a source
        file, chosen by the turn (never by the run id, so every run reads the same text)."""
        path, first, body = self._slices[turn]
        return f"$ {name}  # {path}, from line {first}\n{body}"

    @functools.cached_property
    def _slices(self) -> dict[int, tuple[str, int, str]]:
        return {turn: self._slice(turn) for turn in range(2, self.turns + 1)}

    def _slice(self, turn: int) -> tuple[str, int, str]:
        paths = list(self.corpus)
        path = paths[_stable("file", turn) % len(paths)]
        text = self.corpus[path]
        while len(text) < 2 * self.output_chars:  # a short file is cycled to size
            text += "\n" + text
        start = text.rfind("\n", 0, _stable("start", turn) % (len(text) - self.output_chars)) + 1
        body = text[start : start + self.output_chars]
        body = body[: body.rfind("\n") + 1] or body
        return path, text.count("\n", 0, start) + 1, body
