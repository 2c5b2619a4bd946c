"""The simulator's calls to the Codex CLI's own tools: valid for Codex (which parses the
arguments into Rust structs, so `yield_time_ms` must be an unsigned integer) and meaningful
(the command the user quoted, no invented working directory).

The schemas are codex-rs's (`codex-rs/tools/src/local_tool.rs`, `plan_tool.rs`,
`view_image.rs`), as its `JsonSchema` serialises them: properties in name order, `strict:
false`, `additionalProperties: false`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support.codex import codex_binary, codex_home, run_codex
from support.tools import APPLY_PATCH_GRAMMAR

from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.vocab import harmony_encoding
from turnpike.worker.answer_kinds import FunctionCallAnswer
from turnpike.worker.answers import plan_answer

ENCODING = harmony_encoding()


def _s(description: str | None = None) -> dict[str, Any]:
    return {"type": "string", **({"description": description} if description else {})}


def _n(description: str) -> dict[str, Any]:
    return {"type": "number", "description": description}


_WAIT = "How long to wait (in milliseconds) for output before yielding."
_MAX_TOKENS = "Maximum number of tokens to return. Excess output will be truncated."

EXEC_COMMAND = {
    "type": "object",
    "properties": {
        "cmd": _s("Shell command to execute."),
        "justification": _s(
            'Only set if sandbox_permissions is \\"require_escalated\\".\n'
            "                    Request approval from the user to run this command outside"
            " the sandbox."
        ),
        "login": {
            "type": "boolean",
            "description": "Whether to run the shell with -l/-i semantics. Defaults to true.",
        },
        "max_output_tokens": _n(_MAX_TOKENS),
        "prefix_rule": {
            "type": "array",
            "description": "Only specify when sandbox_permissions is `require_escalated`.",
            "items": {"type": "string"},
        },
        "sandbox_permissions": _s(
            'Sandbox permissions for the command. Set to "require_escalated" to request running'
            ' without sandbox restrictions; defaults to "use_default".'
        ),
        "shell": _s("Shell binary to launch. Defaults to the user's default shell."),
        "tty": {
            "type": "boolean",
            "description": "Whether to allocate a TTY for the command. Defaults to false (plain"
            " pipes); set to true to open a PTY and access TTY process.",
        },
        "workdir": _s(
            "Optional working directory to run the command in; defaults to the turn cwd."
        ),
        "yield_time_ms": _n(_WAIT),
    },
    "required": ["cmd"],
    "additionalProperties": False,
}
WRITE_STDIN = {
    "type": "object",
    "properties": {
        "chars": _s("Bytes to write to stdin (may be empty to poll)."),
        "max_output_tokens": _n(_MAX_TOKENS),
        "session_id": _n("Identifier of the running unified exec session."),
        "yield_time_ms": _n(_WAIT),
    },
    "required": ["session_id"],
    "additionalProperties": False,
}
UPDATE_PLAN = {
    "type": "object",
    "properties": {
        "explanation": _s(),
        "plan": {
            "type": "array",
            "description": "The list of steps",
            "items": {
                "type": "object",
                "properties": {
                    "status": _s("One of: pending, in_progress, completed"),
                    "step": _s(),
                },
                "required": ["step", "status"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["plan"],
    "additionalProperties": False,
}
VIEW_IMAGE = {
    "type": "object",
    "properties": {"path": _s("Local filesystem path to an image file")},
    "required": ["path"],
    "additionalProperties": False,
}
SHELL_COMMAND = {
    "type": "object",
    "properties": {
        "command": _s("The shell script to execute in the user's default shell"),
        "login": {"type": "boolean", "description": "Whether to run the shell with login shell"},
        "timeout_ms": _n("The timeout for the command in milliseconds"),
        "workdir": _s("The working directory to execute the command in"),
    },
    "required": ["command"],
    "additionalProperties": False,
}


def _tool(name: str, description: str, schema: dict) -> cv.Tool:
    return cv.Tool(name=name, description=description, parameters_json=json.dumps(schema))


CODEX_TOOLS = [
    _tool(
        "exec_command",
        "Runs a command in a PTY, returning output or a session ID for ongoing interaction.",
        EXEC_COMMAND,
    ),
    _tool(
        "write_stdin",
        "Writes characters to an existing unified exec session and returns recent output.",
        WRITE_STDIN,
    ),
    _tool(
        "update_plan",
        "Updates the task plan.\nProvide an optional explanation and a list of plan items, each"
        " with a step and status.\nAt most one step can be in_progress at a time.\n",
        UPDATE_PLAN,
    ),
    _tool(
        "view_image",
        "View a local image from the filesystem (only use if given a full filepath by the user,"
        " and the image isn't already attached to the thread context within <image ...> tags).",
        VIEW_IMAGE,
    ),
]
SCHEMAS = {t.name: json.loads(t.parameters_json) for t in CODEX_TOOLS}


def _count(text: str) -> int:
    return len(ENCODING.encode(text, allowed_special=set(), disallowed_special=()))


def call(text: str, tools: list[cv.Tool] = CODEX_TOOLS, seed: int = 0, choice: str = ""):
    """The simulator's answer to one user message, as Codex would send it."""
    items = [
        cv.Item(
            kind=cv.Item.MESSAGE, role="user", text="<environment_context>...</environment_context>"
        ),
        cv.Item(kind=cv.Item.MESSAGE, role="user", text=text),
    ]
    answer = plan_answer(items, tools, choice, seed, _count)
    assert isinstance(answer, FunctionCallAnswer)
    arguments = json.loads(answer.arguments)
    schema = json.loads(next(t for t in tools if t.name == answer.name).parameters_json)
    jsonschema.validate(arguments, schema)
    return answer.name, arguments


def _codex_accepts(name: str, arguments: dict) -> None:
    """What Codex's serde structs accept: the integers are unsigned integers, and
    `sandbox_permissions` is an enum (a made-up word is a parse error)."""
    for key in ("yield_time_ms", "max_output_tokens", "session_id", "timeout_ms"):
        if key in arguments:
            value = arguments[key]
            assert isinstance(value, int) and not isinstance(value, bool) and value >= 0, (
                f"{name}.{key} = {value!r} is not a u64"
            )
    if "sandbox_permissions" in arguments:
        assert arguments["sandbox_permissions"] in (
            "use_default",
            "require_escalated",
            "with_additional_permissions",
        )


@pytest.mark.parametrize(
    "text",
    [
        "run `ls`",
        "Run `ls -la /tmp` please",
        "what files are here? run the command to list them",
        "",
        "run pwd",
    ],
)
@pytest.mark.parametrize("seed", [0, 1, 7])
def test_exec_command_arguments_are_what_codex_accepts(text: str, seed: int) -> None:
    name, arguments = call(text, seed=seed, choice="exec_command")
    assert name == "exec_command"
    _codex_accepts(name, arguments)
    # Only the command: nothing the user did not ask for (no invented workdir).
    assert set(arguments) == {"cmd"}


def test_run_a_quoted_command_runs_that_command() -> None:
    assert call("run `ls`") == ("exec_command", {"cmd": "ls"})
    assert call("Please run `git status --short` and summarise it") == (
        "exec_command",
        {"cmd": "git status --short"},
    )


def test_a_command_after_run_is_the_command() -> None:
    assert call("run ls -la")[1] == {"cmd": "ls -la"}
    assert call("Run echo hello world.")[1] == {"cmd": "echo hello world"}
    assert call("can you run uname -a? thanks")[1] == {"cmd": "uname -a"}
    # A fenced block: its body, not the language tag.
    assert call("Run this:\n```bash\nls -la | wc -l\n```")[1] == {"cmd": "ls -la | wc -l"}


def test_optional_properties_the_user_names_are_filled_from_their_words() -> None:
    name, arguments = call("run `ls` with workdir /tmp and yield_time_ms=5000")
    assert name == "exec_command"
    assert arguments == {"cmd": "ls", "workdir": "/tmp", "yield_time_ms": 5000}
    _codex_accepts(name, arguments)
    _, with_tty = call("run `top` with tty, max_output_tokens: 200")
    assert with_tty == {"cmd": "top", "tty": True, "max_output_tokens": 200}


def test_a_named_property_without_a_fitting_value_stays_out() -> None:
    # "workdir" named, but no value follows; a number property named with a word after it.
    _, arguments = call("run `pwd` to see the workdir")
    assert arguments == {"cmd": "pwd"}
    _, arguments = call("run `ls`, yield_time_ms as you like")
    assert arguments == {"cmd": "ls"}


def test_shell_command_gets_the_command_string() -> None:
    tools = [_tool("shell_command", "Runs a shell command and returns its output.", SHELL_COMMAND)]
    name, arguments = call("run `cat README.md` with timeout_ms 10000", tools)
    assert (name, arguments) == ("shell_command", {"command": "cat README.md", "timeout_ms": 10000})
    _codex_accepts(name, arguments)


def test_write_stdin_gets_an_integer_session_id() -> None:
    name, arguments = call("write to the session 3 stdin", choice="write_stdin")
    assert name == "write_stdin"
    assert arguments == {"session_id": 3}
    _codex_accepts(name, arguments)
    _, fallback = call("poll the session", choice="write_stdin")
    assert set(fallback) == {"session_id"}
    _codex_accepts("write_stdin", fallback)


def test_update_plan_steps_have_a_status_codex_knows() -> None:
    name, arguments = call("update the plan: first read the code, then fix the bug")
    assert name == "update_plan"
    assert set(arguments) == {"plan"}
    for item in arguments["plan"]:
        assert item["status"] in ("pending", "in_progress", "completed")
        assert item["step"]


def test_view_image_gets_the_path_the_user_gave() -> None:
    name, arguments = call("view the image screenshots/login.png")
    assert (name, arguments) == ("view_image", {"path": "screenshots/login.png"})


# -- a plan: one call per step, Codex's freeform apply_patch among them --------------------

APPLY_PATCH = cv.Tool(
    name="apply_patch",
    description="Use the `apply_patch` tool to edit files. This is a FREEFORM tool.",
    custom=True,
    format_json=json.dumps(
        {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_GRAMMAR}
    ),
)
PLAN = (
    "Please do this:\n"
    "1. Run `git status`.\n"
    "2. Apply a patch that adds notes.md with a greeting.\n"
    "3. Run `cat notes.md`.\n"
)


def _turns(
    plan: str, tools: list[cv.Tool], limit: int = 10
) -> tuple[list[FunctionCallAnswer], str]:
    """The simulator's answers through a whole plan, each call answered with an output:
    the calls, and the closing message's text."""
    items = [cv.Item(kind=cv.Item.MESSAGE, role="user", text=plan)]
    calls: list[FunctionCallAnswer] = []
    for turn in range(limit):
        answer = plan_answer(items, tools, "", 0, _count)
        if not isinstance(answer, FunctionCallAnswer):
            return calls, answer.text
        calls.append(answer)
        call_id = f"call_{turn}"
        items += [
            cv.Item(
                kind=cv.Item.FUNCTION_CALL,
                custom=answer.custom,
                call_id=call_id,
                name=answer.name,
                arguments=answer.arguments,
            ),
            cv.Item(kind=cv.Item.FUNCTION_CALL_OUTPUT, custom=answer.custom, call_id=call_id),
        ]
    raise AssertionError(f"no closing message after {limit} turns")


def test_a_plan_is_followed_one_call_per_step_then_a_message() -> None:
    calls, closing = _turns(PLAN, [*CODEX_TOOLS, APPLY_PATCH])
    assert [(c.name, c.custom) for c in calls] == [
        ("exec_command", False),
        ("apply_patch", True),
        ("exec_command", False),
    ]
    assert json.loads(calls[0].arguments) == {"cmd": "git status"}
    assert json.loads(calls[2].arguments) == {"cmd": "cat notes.md"}
    patch = calls[1].arguments
    assert patch.startswith("*** Begin Patch\n*** Add File: notes.md\n+")
    assert patch.rstrip("\n").endswith("*** End Patch")
    assert isinstance(closing, str) and closing


def test_one_list_line_is_not_a_plan() -> None:
    calls, closing = _turns("Things to do:\n- run `ls`\n", CODEX_TOOLS)
    assert len(calls) == 1 and isinstance(closing, str)


# -- end to end: the real Codex CLI runs the command ---------------------------------------


@pytest.mark.stack
@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_codex_exec_runs_the_quoted_command(stack, tmp_path: Path, websockets: bool) -> None:
    if codex_binary() is None:
        pytest.skip("openai-codex-cli-bin is not installed")
    work = tmp_path / "work"
    work.mkdir()
    (work / "turnpike-marker.txt").write_text("x")
    home = codex_home(tmp_path / "codex", stack.base_url, websockets=websockets)
    result = run_codex(home, work, "run `ls`", api_key=stack.api_key)
    assert result.exit_code == 0, result.stderr
    # The simulator's last message quotes the tool's output: ls listed the folder.
    assert "turnpike-marker.txt" in result.stdout, (result.stdout, result.stderr)


def test_a_quoted_command_goes_to_a_tool_that_runs_one_whatever_the_other_words() -> None:
    """Codex 0.163 also sends goal tools; "Run `git status`" shared "run" and "status"
    (counted twice, with its "singular" "statu") with update_goal, which outscored
    exec_command: the command never ran."""
    update_goal = _tool(
        "update_goal",
        "Update the status of the goal when its run is complete.",
        {"type": "object", "properties": {"status": _s()}, "required": ["status"]},
    )
    tools = [update_goal, *CODEX_TOOLS]
    for text in ("Run `git status`.", "Run `git status --short`"):
        name, arguments = call(text, tools)
        assert name == "exec_command" and arguments["cmd"].startswith("git status")
    # Without a quoted command the words still choose.
    assert call("Update the goal status to complete", tools)[0] == "update_goal"
