"""The scripted task Codex is given: a numbered plan of read-only shell commands and two
patches that add files, which the simulator model follows one tool call per step (pure:
no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

MIN_CALLS = 10
# Read-only commands on the task's repository (README.md is its one committed file); a
# longer task cycles through them again.
COMMANDS = (
    "git status",
    "ls",
    "cat README.md",
    "git log --oneline",
    "wc -l README.md",
    "git branch --list",
    "head -n 3 README.md",
    "git status --short",
    "ls -la",
    "git show --stat HEAD",
)
# The files the two patches add, each with what the step asks it to hold.
PATCHES = (("notes.md", "a greeting"), ("todo.md", "a short list of next steps"))


@dataclass(frozen=True)
class Step:
    text: str  # the plan's line, without its number
    command: str = ""  # the shell command it quotes, for a command step
    adds: str = ""  # the file it adds, for a patch step


@dataclass(frozen=True)
class Task:
    steps: tuple[Step, ...]

    @property
    def calls(self) -> int:
        return len(self.steps)

    @property
    def commands(self) -> tuple[str, ...]:
        return tuple(s.command for s in self.steps if s.command)

    @property
    def added_files(self) -> tuple[str, ...]:
        return tuple(s.adds for s in self.steps if s.adds)

    def prompt(self) -> str:
        lines = [f"{i}. {step.text}" for i, step in enumerate(self.steps, 1)]
        return "Work through this plan in order, one step at a time:\n" + "\n".join(lines) + "\n"


def command_step(command: str) -> Step:
    return Step(f"Run `{command}`", command=command)


def patch_step(path: str, content: str) -> Step:
    return Step(f"Apply a patch that adds {path} with {content}.", adds=path)


def scripted_task(calls: int = 12) -> Task:
    """``calls`` steps: read-only commands, with the two patches at about a third and two
    thirds of the way (so later commands see the files they added)."""
    if calls < MIN_CALLS:
        raise ValueError(f"a task has at least {MIN_CALLS} tool calls, not {calls}")
    commands = calls - len(PATCHES)
    at = {commands * (i + 1) // (len(PATCHES) + 1) + i: p for i, p in enumerate(PATCHES)}
    steps: list[Step] = []
    command_index = 0
    for position in range(calls):
        if position in at:
            steps.append(patch_step(*at[position]))
        else:
            steps.append(command_step(COMMANDS[command_index % len(COMMANDS)]))
            command_index += 1
    return Task(tuple(steps))
