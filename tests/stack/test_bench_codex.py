"""The Codex benchmark (`python -m bench.codex`): its pure parts (the scripted task, the
parsing of Codex's `--json` events and of its trace log of request bodies, the numbers per
transport), and a bounded run end to end (one timed run per transport, a 10-call task)
against a stack of its own, checked for shape and for a task that really ran."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO_ROOT

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))  # bench/ is not installed, it runs from here

from bench.codex.cli import codex_binary
from bench.codex.events import parse_events
from bench.codex.spans import Request
from bench.codex.stats import not_run, ratios, summarize, task_run
from bench.codex.task import scripted_task
from bench.codex.wire import WireRequest, parse_wire_log, rust_bytes

# -- pure parts ---------------------------------------------------------------------------


def test_the_task_is_a_numbered_plan_with_two_patches() -> None:
    task = scripted_task(10)
    assert task.calls == 10 and len(task.commands) == 8
    assert task.added_files == ("notes.md", "todo.md")
    lines = task.prompt().splitlines()[1:]
    assert [line.split(". ", 1)[0] for line in lines] == [str(i) for i in range(1, 11)]
    assert lines[0] == "1. Run `git status`"
    assert sum("Apply a patch that adds" in line for line in lines) == 2
    assert len(set(scripted_task(25).commands)) == 10  # a longer task cycles the commands
    with pytest.raises(ValueError):
        scripted_task(9)


EXEC_JSON = "\n".join(
    json.dumps(e)
    for e in (
        {"type": "thread.started", "thread_id": "t1"},
        {"type": "turn.started"},
        {
            "type": "item.completed",
            "item": {
                "type": "command_execution",
                "command": "ls",
                "exit_code": 0,
                "status": "completed",
            },
        },
        {
            "type": "item.completed",
            "item": {
                "type": "command_execution",
                "command": "false",
                "exit_code": 1,
                "status": "failed",
            },
        },
        {
            "type": "item.completed",
            "item": {
                "type": "file_change",
                "changes": [{"path": "a.md", "kind": "add"}],
                "status": "completed",
            },
        },
        {"type": "item.completed", "item": {"type": "reasoning", "text": "..."}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "Done."}},
        {"type": "turn.completed", "usage": {"input_tokens": 30, "cached_input_tokens": 20}},
    )
)


def test_exec_events_count_the_tool_calls() -> None:
    events = parse_events(EXEC_JSON + "\nnot json\n")
    assert events.thread_id == "t1" and events.final_message == "Done."
    assert events.commands == ["ls", "false"] and events.patches == ["a.md"]
    assert [c.ok for c in events.calls] == [True, False, True]
    assert events.usage == {"input_tokens": 30, "cached_input_tokens": 20}
    assert events.unparsed_lines == 1


def test_the_trace_log_gives_each_request_body() -> None:
    http_body = json.dumps({"model": "m", "input": [{}, {}, {}], "store": False})
    frame = json.dumps(
        {"type": "response.create", "previous_response_id": "resp_1", "input": [{"t": "é\n"}]},
        ensure_ascii=False,
    ).encode()
    # Rust's Debug of a byte string: quotes and backslashes escaped, non-ASCII as \xNN.
    debug = "".join(
        chr(b) if 32 <= b < 127 and b not in b'"\\' else
        {ord('"'): '\\"', ord("\\"): "\\\\", 10: "\\n"}.get(b, f"\\x{b:02x}")
        for b in frame
    )  # fmt: skip
    assert rust_bytes(debug) == frame
    log = "\n".join(
        [
            "2026-01-01T00:00:00Z TRACE codex_http_client::transport: POST to "
            f"http://127.0.0.1:1/v1/responses: {http_body}",
            "2026-01-01T00:00:01Z TRACE tungstenite::protocol: Sending frame: Frame { header: "
            f'FrameHeader {{ opcode: Data(Text) }}, payload: b"{debug}" }}',
            "2026-01-01T00:00:01Z TRACE tungstenite::protocol: Sending frame: Frame { header: "
            'FrameHeader { opcode: Control(Ping) }, payload: b"" }',
            "2026-01-01T00:00:02Z WARN codex_core: something else",
        ]
    )
    assert parse_wire_log(log) == [
        WireRequest("http", len(http_body), 3, False, False, True),
        WireRequest("websocket", len(frame), 1, True, None, True),
    ]


def _request(overhead: float, tokens: int = 100, cached: int = 50) -> Request:
    return Request("r", "sse", 0, overhead + 10, overhead, overhead * 2, tokens, cached, 5, "ok")


def _run(transport: str, rep: int, calls: int, wall: float, overheads: list[float]):
    events = parse_events(EXEC_JSON)
    events.calls = events.calls[:1] * calls
    wire = [WireRequest(transport, 1000, 1, transport == "websocket", False, True)] * 2
    warmup = Request("w", transport, 0, 1.0, None, None, 0, 0, 0, "ok")
    requests = [_request(o) for o in overheads] + [warmup]
    return task_run(transport, rep, wall, 0, events, requests, wire, [])


def test_numbers_per_transport_and_their_ratios() -> None:
    http = [_run("http", 0, 10, 9000.0, [99.0]), _run("http", 1, 10, 4000.0, [10.0, 30.0])]
    http.append(_run("http", 2, 9, 6000.0, [20.0]))
    ws = [_run("websocket", 1, 10, 3000.0, [5.0, 15.0])]
    a, b = summarize(http, 10), summarize(ws, 10)
    assert a["tasks"] == 2 and a["tasks_ok"] == 1  # the warm-up is not timed; 9 calls fail
    assert http[2].problems(10) == ["9 of 10 tool calls"]
    ran = ["/bin/bash -lc ls", "/bin/bash -lc 'git status --short'", "git log"]
    assert not_run(["ls", "git status", "git status --short", "git log"], ran) == ["git status"]
    assert a["wall_ms"]["median"] == 5000.0
    assert a["overhead_ms"] == {"median": 20.0, "p90": 30.0, "n": 3}
    assert a["requests_per_task"]["median"] == 1.5 and a["warmup_requests_per_task"]["median"] == 1
    assert a["cached_share"] == 0.5 and a["bytes_per_task"]["median"] == 2000
    assert b["previous_response_id_share"] == 1.0 and a["previous_response_id_share"] == 0.0
    r = ratios({"http": a, "websocket": b})
    assert r["wall_ms"] == 0.6 and r["overhead_ms"] == 0.5


# -- end to end -----------------------------------------------------------------------------


@pytest.mark.stack
@pytest.mark.skipif(codex_binary() is None, reason="openai-codex-cli-bin is not installed")
def test_a_bounded_run_writes_every_result(tmp_path: Path) -> None:
    out = tmp_path / "results"
    run = subprocess.run(
        [sys.executable, "-m", "bench.codex", "--reps", "1", "--calls", "10", "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    why = run.stdout[-2000:] + run.stderr[-4000:]
    assert "warm-up websocket" in run.stderr and "rep 1" in run.stderr, why  # progress

    data = json.loads((out / "codex.json").read_text())
    assert data["params"]["calls"] == 10 and data["params"]["reps"] == 1
    assert data["span_attributes_missing"] == [], why
    assert [(r["transport"], r["rep"]) for r in data["runs"]] == [
        ("http", 0),
        ("websocket", 0),
        ("http", 1),
        ("websocket", 1),
    ]
    problems = [(r["transport"], r["rep"], r["problems"]) for r in data["runs"]]
    for transport, s in data["transports"].items():
        assert s["tasks"] == 1, transport
        # The task really ran: ten tool calls, and the files its patches add are there.
        assert s["tool_calls_per_task"]["min"] >= 10, (transport, problems)
        assert s["tasks_ok"] == 1, (transport, problems)
        assert s["requests_per_task"]["median"] >= 11, transport  # a call each, and a close
        assert s["overhead_ms"]["median"] >= 0 and s["ttft_ms"]["median"] > 0, transport
        assert s["input_tokens_per_request"]["median"] > 0, transport
        assert s["request_bytes"]["n"] >= 11, transport  # every body, from Codex's log
    http, ws = data["transports"]["http"], data["transports"]["websocket"]
    # HTTP resends the history statelessly; WebSocket chains and sends only what is new.
    assert http["store_values"] == ["false"] and http["previous_response_id_share"] == 0
    assert ws["previous_response_id_share"] == 1
    assert ws["input_items_per_request"]["median"] < http["input_items_per_request"]["median"]
    assert set(data["ratios"]) >= {"wall_ms", "overhead_ms", "ttft_ms", "requests_per_task"}
    assert run.returncode == 0, why

    markdown = (out / "codex.md").read_text()
    assert "## Per transport" in markdown and "| wall time per task, median ms |" in markdown
    assert "## Where the transports differ" in markdown and "(codex.png)" in markdown
    assert (out / "codex.png").stat().st_size > 10_000
