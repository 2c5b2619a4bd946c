"""What ``codex exec --json`` reported of one task: the tool calls it made (in order), its
closing message, token usage and errors (pure: parses the JSONL text)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

# Item types of Codex's exec events that are a tool call of the model.
TOOL_ITEMS = frozenset(
    {"command_execution", "file_change", "mcp_tool_call", "web_search", "collab_tool_call"}
)


@dataclass(frozen=True)
class ToolCall:
    kind: str  # command_execution, file_change, ...
    detail: str  # the command, or the paths a patch changed
    ok: bool  # completed (exit code 0 / patch applied)


@dataclass
class ExecEvents:
    thread_id: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    final_message: str = ""
    usage: dict[str, int] = field(default_factory=dict)  # summed over turn.completed
    errors: list[str] = field(default_factory=list)
    unparsed_lines: int = 0

    @property
    def commands(self) -> list[str]:
        return [c.detail for c in self.calls if c.kind == "command_execution"]

    @property
    def patches(self) -> list[str]:
        return [c.detail for c in self.calls if c.kind == "file_change"]


def _detail(item: dict) -> str:
    if item.get("type") == "command_execution":
        return str(item.get("command") or "")
    if item.get("type") == "file_change":
        return ",".join(str(c.get("path") or "") for c in item.get("changes") or ())
    return str(item.get("tool") or item.get("query") or item.get("type"))


def _ok(item: dict) -> bool:
    if item.get("status") not in (None, "completed"):
        return False
    return item.get("exit_code") in (None, 0)


def parse_events(stdout: str) -> ExecEvents:
    events = ExecEvents()
    for line in stdout.splitlines():
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            events.unparsed_lines += 1
            continue
        kind = event.get("type")
        if kind == "thread.started":
            events.thread_id = str(event.get("thread_id") or "")
        elif kind == "item.completed":
            item = event.get("item") or {}
            if item.get("type") in TOOL_ITEMS:
                events.calls.append(ToolCall(item["type"], _detail(item), _ok(item)))
            elif item.get("type") == "agent_message":
                events.final_message = str(item.get("text") or "")
            elif item.get("type") == "error":
                events.errors.append(str(item.get("message") or ""))
        elif kind == "turn.completed":
            for key, value in (event.get("usage") or {}).items():
                if isinstance(value, int):
                    events.usage[key] = events.usage.get(key, 0) + value
        elif kind in ("turn.failed", "error"):
            error = event.get("error") or {}
            events.errors.append(str(error.get("message") or event.get("message") or kind))
    return events
