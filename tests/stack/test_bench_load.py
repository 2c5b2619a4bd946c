"""The load generator (`python -m bench.load`): its pure parts (percentiles, the event
parsing of both transports, the per-cell numbers, the report), and its quick run end to
end against a stack of its own, checked for sane numbers: every turn sent is answered
and billed once, overhead is never negative, every service is accounted for."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO_ROOT

SERVICES = ("gateway", "safety", "tokenizer", "router", "billing", "imageres", "worker")


@pytest.fixture(autouse=True)
def _bench_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO_ROOT))  # bench/ is not installed, it runs from here


# -- pure parts ---------------------------------------------------------------------------


def test_percentiles_are_nearest_rank_samples() -> None:
    from bench.load.stats import dist

    d = dist([float(x) for x in range(100, 0, -1)])  # 1..100, unordered
    assert (d["p50"], d["p90"], d["p99"], d["max"], d["n"]) == (50, 90, 99, 100, 100)
    assert d["mean"] == 50.5
    assert dist([7.0]) == {"p50": 7, "p90": 7, "p99": 7, "mean": 7, "max": 7, "n": 1}
    assert dist([1.0, 2.0, 3.0])["p99"] == 3  # a real sample, never interpolated
    assert dist([])["p50"] is None and dist([])["n"] == 0


def test_websocket_event_type_read_without_decoding() -> None:
    from bench.load.transports import frame_type

    assert frame_type('{"type":"response.completed","response":{"id":"r"}}') == (
        "response.completed"
    )
    # Another key order, spaces, or bytes: decoded whole, same answer.
    assert frame_type('{"sequence_number": 3, "type": "error"}') == "error"
    assert frame_type(b'{"type":"response.output_text.delta"}') == "response.output_text.delta"
    assert frame_type('{"type":"a\\"b"}') == 'a"b'


def test_sse_event_parsing() -> None:
    from bench.load.transports import sse_event

    assert sse_event(b'event: response.completed\ndata: {"a":1}') == (
        "response.completed",
        [b'{"a":1}'],
    )
    assert sse_event(b"data: [DONE]") == ("", [b"[DONE]"])
    assert sse_event(b"event:x\ndata:1\ndata:2") == ("x", [b"1", b"2"])


def test_failures_become_countable_kinds() -> None:
    from bench.load.transports import failure_of, http_failure

    err = failure_of({"type": "error", "status": 503, "error": {"code": "service_unavailable"}})
    assert err.kind == "error 503: service_unavailable" and not err.dropped
    failed = failure_of(
        {"type": "response.failed", "response": {"error": {"code": "x", "message": "why"}}}
    )
    assert failed.kind == "response.failed: x" and failed.message == "why"
    cut = failure_of(
        {"type": "response.incomplete", "response": {"incomplete_details": {"reason": "len"}}}
    )
    assert cut.kind == "response.incomplete: len"
    assert http_failure(429, b'{"error":{"code":"rate_limited"}}').kind == "HTTP 429: rate_limited"
    assert http_failure(502, b"<html>bad gateway</html>").kind == "HTTP 502"


def _reply(turn_ms: float, model_ms: float, call: bool = True):
    from bench.load.transports import Reply

    output = [{"type": "function_call", "call_id": "c1", "name": "read_file"}] if call else []
    response = {
        "id": "resp_1",
        "output": output,
        "usage": {"input_tokens": 1000, "output_tokens": 20},
        "turnpike": {"pipeline": "connection", "model_ms": {"total_ms": model_ms}},
    }
    return Reply(turn_ms=turn_ms, ttft_ms=turn_ms / 2, response=response)


def test_cell_numbers_from_a_tally() -> None:
    from bench.load.stats import Tally, call_of, cell_record
    from bench.load.transports import TurnFailed

    tally = Tally()
    for turn_ms in (110.0, 120.0, 130.0):
        tally.sent += 1
        tally.completed(_reply(turn_ms, 100.0))
    tally.sent += 1
    tally.failed(TurnFailed("socket dropped (close 1006)", dropped=True), turn=True)
    tally.failed(TurnFailed("connect failed: OSError"), turn=False)
    assert call_of(_reply(1, 1).response) == ("c1", "read_file")
    assert call_of(_reply(1, 1, call=False).response) is None

    cpu = {"gateway": 30.0, "worker": 15.0, "safety": 3.0}
    cell = cell_record("websocket", 2, 1, 2, tally, 2.0, 6.0, cpu, {"billed_responses": 3})
    assert cell["turns_sent"] == cell["turns_ok"] + cell["turn_errors"] == 4
    assert cell["turns_planned"] == 4 and cell["turns_per_s"] == 1.5
    assert cell["overhead_ms"]["p50"] == 20 and cell["overhead_ms"]["max"] == 30
    assert cell["errors"] == {"socket dropped (close 1006)": 1, "connect failed: OSError": 1}
    assert cell["error_count"] == 2 and cell["dropped"] == 1
    # CPU per completed turn; the stack is the services' sum; absent services stay absent.
    assert cell["cpu_ms_per_turn"] == {"gateway": 10, "safety": 1, "worker": 5, "stack": 16}
    assert cell["client_cpu_ms_per_turn"] == 2
    assert cell["stack_cores"] == 0.024 and cell["client_cores"] == 0.003  # over 2 s
    assert cell["pipelines"] == {"connection": 3} and cell["billed_responses"] == 3


def _cell(transport: str, loops: int, p50: float, errors: int = 0) -> dict:
    from bench.load.stats import Tally, cell_record

    tally = Tally()
    for turn_ms in (p50 + 100, p50 + 100, p50 + 200):
        tally.sent += 1
        tally.completed(_reply(turn_ms, 100.0))
    for _ in range(errors):
        tally.sent += 1
        tally.failed(_dropped(), turn=True)
    cpu = dict.fromkeys(SERVICES, 3.0)
    return cell_record(transport, loops, 1, 3, tally, 1.0, 1.5, cpu)


def _dropped():
    from bench.load.transports import TurnFailed

    return TurnFailed("socket dropped (close 1006)", dropped=True)


def test_ratios_targets_and_report_tables() -> None:
    from bench.load.report import markdown
    from bench.load.stats import add_ratios, targets

    cells = [
        _cell("websocket", 1, 10.0),
        _cell("http", 1, 20.0),
        _cell("websocket", 50, 35.0),
        _cell("http", 50, 30.0),
        _cell("websocket", 100, 80.0, errors=2),
    ]
    add_ratios(cells)
    assert [c["overhead_p50_vs_1"] for c in cells] == [1.0, 1.0, 3.5, 1.5, 8.0]
    found = targets(cells, "turnpike-sim")
    assert found[0]["measured"] == 10.0  # one loop over WebSocket
    fifty = {t["name"]: t for t in found if t["name"].startswith("50 loops")}
    assert (
        fifty["50 loops over websocket at turnpike-sim: p50 overhead vs one loop"]["pass"] is False
    )
    assert fifty["50 loops over http at turnpike-sim: p50 overhead vs one loop"]["pass"] is True
    hundred = found[-1]
    assert hundred["measured"] == 8.0 and "2 errors (2 dropped connections)" in hundred["detail"]
    assert "35.0 ms vs 10.0 ms alone (3.5x)" in found[1]["detail"]

    data = {
        "command": "make bench-load",
        "mode": "full",
        "date": "2026-12-01T00:00:00+00:00",
        "duration_s": 100.0,
        "machine": {
            "cpu_count": 2,
            "implementation": "CPython",
            "python": "3.11",
            "platform": "Linux",
            "loadavg_start": [1.0, 1.0, 1.0],
            "loadavg_end": [2.0, 2.0, 2.0],
        },
        "stack": "running stack",
        "note": "a quiet machine",
        "params": {
            "tools": 8,
            "output_chars": 4000,
            "turns": 3,
            "model": "turnpike-sim",
            "stagger_s": 0.5,
            "min_turns": 3,
            "clients": {"websocket": "websockets 1", "http": "httptools 1"},
        },
        "idle_cpu_ms_per_s": {"gateway": 1.0},
        "cells": cells,
        "targets": found,
        "plots": ["load.png"],
    }
    text = markdown(data)
    assert "against a stack started by `make run`" in text and "a quiet machine" in text
    assert "| websocket | 100 | 3/5 | 3.0 | 180.0 / 280.0 / 280.0 | 80.0 | 180.0 | 180.0 |" in text
    assert "| http | 50 | 3/3 |" in text and "| 8.00x |" in text
    # CPU per turn: every service, the stack's sum, the client.
    assert (
        "| websocket | 1 | 1.00 | 1.00 | 1.00 | 1.00 | 1.00 | 1.00 | 1.00 | 7.00 | - | - | 0.50 | 0.02 | 0.00 |"
        in text
    )
    assert "## Errors" in text and "| websocket | 100 | socket dropped (close 1006) | 2 |" in text
    assert "(**miss**)" in text and "![load.png](load.png)" in text
    assert "No errors" in markdown({**data, "cells": cells[:2]})


def test_a_profile_needs_a_swept_websocket_cell() -> None:
    from bench.load.__main__ import main

    assert main(["--quick", "--profile", "unused", "--profile-at", "7"]) == 2


def test_plan_from_the_command_line() -> None:
    from bench.load.__main__ import FULL, command_line, parse_args, plan_from

    assert plan_from(parse_args([])) == FULL
    assert FULL.loops == (1, 10, 25, 50, 100) and FULL.transports == ("websocket", "http")
    plan = plan_from(
        parse_args(["--quick", "--loops", "1,3", "--transports", "sse", "--turns", "5"])
    )
    assert (plan.loops, plan.transports, plan.turns) == ((1, 3), ("http",), 5)
    # Enough rollouts per loop for the cell's minimum of turns, never fewer than one.
    assert FULL.rollouts_per_loop(1) == 8 and FULL.rollouts_per_loop(100) == 1
    # The command to run it again leaves out the note on this run's machine.
    assert command_line(["--quick", "--note", "busy", "--loops", "1"]) == (
        "make bench-load BENCH_ARGS='--quick --loops 1'"
    )
    with pytest.raises(SystemExit):
        parse_args(["--transports", "grpc"])
    with pytest.raises(SystemExit):
        plan_from(parse_args(["--turns", "1"]))


# -- end to end ---------------------------------------------------------------------------


def test_quick_run_against_its_own_stack(tmp_path: Path) -> None:
    out, profiles = tmp_path / "results", tmp_path / "profiles"
    # 64 turns a cell: the quick run's 16 gave py-spy about 11 samples of the gateway at
    # 100 Hz, too few to be sure that one landed in the engine (CI once found none).
    command = ["--quick", "--min-turns", "64", "--start-stack", "--out", str(out)]
    command += ["--profile", str(profiles), "--profile-at", "4"]
    run = subprocess.run(
        [sys.executable, "-m", "bench.load", *command],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "websocket, 4 loop(s) at once" in run.stdout and "turns/s" in run.stdout

    data = json.loads((out / "load.json").read_text())
    assert data["mode"] == "quick" and data["params"]["model"] == "turnpike-sim"
    cells = {(c["transport"], c["loops"]): c for c in data["cells"]}
    assert set(cells) == {(t, n) for t in ("websocket", "http") for n in (1, 4)}
    pipelines = {"websocket": "connection", "http": "sprint"}
    spent = dict.fromkeys(SERVICES, 0.0)
    for (transport, loops), c in cells.items():
        why = (c, run.stdout[-2000:])
        # Every turn planned was sent, answered and billed exactly once, with no errors.
        assert c["turns_sent"] == c["turns_ok"] == c["turns_planned"] > 0, why
        assert c["turns_planned"] == loops * c["rollouts_per_loop"] * 4, why
        assert c["billed_responses"] == c["turns_ok"], why
        assert c["billing_pending_after"] == 0, why
        assert c["error_count"] == c["dropped"] == 0 and c["errors"] == {}, why
        assert c["loops_done"] == loops * c["rollouts_per_loop"], why
        assert c["pipelines"] == {pipelines[transport]: c["turns_ok"]}, why
        o, t = c["overhead_ms"], c["turn_ms"]
        assert 0 <= o["p50"] <= o["p90"] <= o["p99"] <= o["max"], why
        assert o["n"] == t["n"] == c["turns_ok"], why
        assert t["p50"] > o["p50"], why  # the model's time is in the turn, not the overhead
        assert c["turns_per_s"] > 0 and c["client_cpu_ms_per_turn"] > 0, why
        assert set(SERVICES) <= c["cpu_ms_per_turn"].keys(), why  # every process was found
        for name in SERVICES:
            assert c["cpu_ms_per_turn"][name] >= 0, why
            spent[name] += c["cpu_ms"][name]
    # /proc counts in 10 ms ticks: over the run the busy services must show.
    busy = ("gateway", "safety", "tokenizer", "worker")
    assert all(spent[name] > 0 for name in busy), (spent, run.stdout[-2000:])
    assert cells[("websocket", 1)]["overhead_p50_vs_1"] == 1.0
    assert data["targets"][0]["name"].startswith("One loop over WebSocket")
    # The machine's unit, measured at both ends of the run, and every CPU figure in it.
    unit = data["machine_unit"]
    assert unit["hop_cpu_ms"] > 0 and unit["start"]["hop"]["wall_ms"] > 0
    assert unit["end"]["stream_message"]["cpu_ms"] > 0
    for c in data["summary"]:
        hops, ms = c["cpu_hops_per_turn"]["stack"], c["cpu_ms_per_turn"]["stack"]
        assert hops == round(ms / unit["hop_cpu_ms"], 2), c

    markdown = (out / "load.md").read_text()
    assert "## Latency and throughput" in markdown and "| websocket | 4 |" in markdown
    assert "## CPU per completed turn, ms" in markdown and "(load.png)" in markdown
    assert "## The machine's unit" in markdown and "stack hops" in markdown
    assert (out / "load.png").stat().st_size > 10_000
    # A flame graph of every process, taken while four loops ran over WebSocket.
    flames = {p.stem: p.read_text() for p in profiles.glob("*.svg")}
    assert {"gateway", "safety", "tokenizer", "router", "billing", "worker-1"} <= set(flames)
    # The engine's own frames (py-spy names a frame by its file): requests were sampled.
    assert "gateway/engine/" in flames["gateway"]
    assert str(tmp_path) not in flames["gateway"]  # titled for what ran, not py-spy's command


def test_runs_side_by_side(tmp_path: Path) -> None:
    from bench.load.compare import main as compare
    from bench.load.compare import without_out

    def cell(transport: str, loops: int, gateway: float) -> dict:
        per = dict.fromkeys(SERVICES, 1.0) | {"gateway": gateway}
        overhead = {"p50": gateway * 2, "p90": gateway * 3}
        return {
            "transport": transport,
            "loops": loops,
            "turns_per_s": 10.0 * loops,
            "overhead_ms": overhead,
            "error_count": 0,
            "cpu_ms_per_turn": per,
            "client_cpu_ms_per_turn": 0.5,
        }

    for name, gateway in (("old", 8.0), ("new", 4.0)):
        folder = tmp_path / name
        folder.mkdir()
        run = {
            "date": "d",
            "command": f"make bench-load BENCH_ARGS='--out /x/{name} --loops 1,10'",
            "note": None,
            "cells": [cell("websocket", 1, gateway), cell("websocket", 10, gateway)],
        }
        (folder / "load.json").write_text(json.dumps(run))
    out = tmp_path / "cmp"
    assert compare([f"old={tmp_path / 'old'}", f"new={tmp_path / 'new'}", "--out", str(out)]) == 0
    text = (out / "capacity.md").read_text()
    # API CPU: gateway + safety + tokenizer + router + billing; new over old = 8/12.
    assert "| websocket | 1 | new | 10.0 | 8.0 | 12.0 | 0 | 8.00 | 1.00 | 0.67x | 0.50x |" in text
    assert "/x/" not in text and (out / "capacity.png").stat().st_size > 10_000
    assert json.loads((out / "new.json").read_text())["command"] == (
        "make bench-load BENCH_ARGS='--loops 1,10'"
    )
    assert without_out("make bench-load BENCH_ARGS='--out /x'") == "make bench-load"


def test_variants_are_parsed_summarized_and_compared() -> None:
    from bench.load.report import markdown
    from bench.load.stats import add_hops, add_ratios, comparisons, summarize
    from bench.load.variants import Variant, parse_variant

    assert parse_variant("after") == Variant("after")
    traced = parse_variant("traced=rev:HEAD~1+tracing+env:TURNPIKE_ACCESS_LOG=false")
    assert traced == Variant("traced", "HEAD~1", True, (("TURNPIKE_ACCESS_LOG", "false"),))
    for bad in ("a b", "x=gpu", "x=rev:", "x=env:NOVALUE", "x=tracing:yes", "=rev:HEAD"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_variant(bad)

    def cell(variant: str, repeat: int, loops: int, p50: float, cpu: float) -> dict:
        c = _cell("websocket", loops, p50)
        c["cpu_ms_per_turn"] = {"gateway": cpu, "stack": 2 * cpu}
        return {"variant": variant, "repeat": repeat, **c}

    cells = [
        cell("before", 1, 1, 10.0, 4.0),
        cell("after", 1, 1, 8.0, 2.0),
        cell("after", 2, 1, 6.0, 3.0),
        cell("before", 2, 1, 12.0, 5.0),
        cell("after", 3, 1, 100.0, 9.0),  # one slow repeat: the median holds
        cell("before", 3, 1, 11.0, 4.5),
    ]
    summary = summarize(cells)
    add_ratios(summary)
    add_hops(summary, 0.5)
    by_variant = {r["variant"]: r for r in summary}
    assert by_variant["after"]["repeats"] == 3 and by_variant["after"]["turns_ok"] == 9
    assert by_variant["after"]["overhead_ms"]["p50"] == 8.0
    assert by_variant["after"]["cpu_ms_per_turn"] == {"gateway": 3.0, "stack": 6.0}
    assert by_variant["after"]["cpu_hops_per_turn"]["stack"] == 12.0  # 6 ms over 0.5 ms
    (row,) = comparisons(summary)
    assert (row["variant"], row["reference"]) == ("after", "before")
    assert row["overhead_p50"] == {"reference": 11.0, "value": 8.0, "ratio": 0.727}
    assert row["stack_cpu_ms"]["ratio"] == round(6.0 / 9.0, 3)

    data = {
        "command": "make bench-load BENCH_ARGS='--variant before=rev:HEAD~1 --variant after'",
        "mode": "full",
        "date": "2026-12-05T00:00:00+00:00",
        "duration_s": 60.0,
        "machine": {
            "cpu_count": 2,
            "implementation": "CPython",
            "python": "3.11",
            "platform": "Linux",
            "loadavg_start": [1.0, 1.0, 1.0],
            "loadavg_end": [1.0, 1.0, 1.0],
        },
        "machine_unit": {
            "hop_cpu_ms": 0.5,
            **{
                end: {
                    "hop_cpu_ms": 0.5,
                    "calls": 3000,
                    "repeats": 3,
                    "hop": {"wall_ms": 0.4},
                    "stream_message": {"cpu_ms": 0.25},
                }
                for end in ("start", "end")
            },
        },
        "stack": "two stacks",
        "variants": [
            {"name": "before", "describe": "revision HEAD~1", "spans": None},
            {"name": "after", "describe": "this checkout", "spans": None},
        ],
        "params": {
            "tools": 8,
            "output_chars": 4000,
            "turns": 3,
            "model": "turnpike-sim",
            "stagger_s": 0.5,
            "min_turns": 3,
            "repeats": 3,
            "clients": {"websocket": "websockets 1", "http": "httptools 1"},
        },
        "idle_cpu_ms_per_s": {"before": {"gateway": 1.0}, "after": {"gateway": 1.0}},
        "cells": cells,
        "summary": summary,
        "comparisons": comparisons(summary),
        "targets": [],
        "plots": ["load.png"],
    }
    text = markdown(data)
    assert "one per variant" in text and "one hop was **0.5000 ms**" in text
    assert "| after vs before | websocket | 1 | 11.0 / 8.0 (0.73x) |" in text
    assert "| variant | repeat | transport | loops |" in text  # every cell, named
    assert "before: gateway 1" in text


def test_a_revision_is_exported_with_its_stubs() -> None:
    from bench.load.variants import source_of

    src = source_of("HEAD")
    assert (src / "turnpike" / "gateway" / "__main__.py").exists()
    assert (src / "turnpike" / "safety" / "v1" / "safety_pb2.py").exists()  # generated there
    assert source_of("HEAD") == src  # kept, not exported twice


async def test_a_shed_turn_is_tried_again_as_the_sdk_would(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.load import driver
    from bench.load.stats import Tally
    from bench.load.transports import TurnFailed, failure_of, http_failure

    shed = http_failure(503, b'{"error":{"code":"server_overloaded"}}')
    assert shed.retryable and not http_failure(503, b'{"error":{"code":"x"}}').retryable
    assert failure_of(
        {"type": "error", "status": 503, "error": {"code": "server_overloaded"}}
    ).retryable
    monkeypatch.setattr(driver, "RETRY_AFTER_S", 0.0)
    tally = Tally()
    answers: list[TurnFailed | str] = [shed, shed, "answer"]

    async def attempt() -> str:
        answer = answers.pop(0)
        if isinstance(answer, TurnFailed):
            raise answer
        return answer

    assert await driver.retried(attempt, tally) == "answer"
    assert tally.retried == {"HTTP 503: server_overloaded": 2} and not tally.errors
    answers[:] = [shed, shed, shed]  # the SDK's two retries spent: the refusal stands
    with pytest.raises(TurnFailed):
        await driver.retried(attempt, tally)
    answers[:] = [TurnFailed("HTTP 400: invalid_request_error"), "never"]
    with pytest.raises(TurnFailed):  # not a refusal to retry
        await driver.retried(attempt, tally)
    assert answers == ["never"]
