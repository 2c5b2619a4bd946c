"""`python -m bench.loop --quick --start-stack` end to end: it starts its own stack, drives
every variant of the agent loop and the load phase, and writes loop.json, loop.md and the
plots. Checks the outputs' shape, never the timings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO_ROOT

PLOTS = (
    "loop_overhead_per_turn.png",
    "loop_ttft_per_turn.png",
    "loop_speedup.png",
    "loop_breakdown.png",
    "loop_stages.png",
    "loop_concurrency.png",
    "loop_capacity.png",
)
VARIANTS = (
    "legacy-http",
    "sprint-http",
    "connection-ws",
    "inject-ws",
    "stateless-http",
    "direct-worker",
)
TURN_KEYS = {"turn", "answer", "ttft_ms", "turn_ms", "model_ms", "overhead_ms", "stages_ms"}


def test_rollout_is_deterministic_and_scripted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO_ROOT))  # bench/ is not installed, it runs from here
    from bench.loop.rollout import Rollout, repo_corpus

    corpus = repo_corpus()
    a, b = Rollout("run_a", corpus, turns=6), Rollout("run_b", corpus, turns=6)
    assert "run_a" in a.instructions and "run_b" not in a.instructions
    # Same tool outputs in every run; a nudge after every output but the last.
    assert a.follow_up_input(3, "c1", "read_file") == b.follow_up_input(3, "c1", "read_file")
    assert [i["type"] for i in a.follow_up_input(2, "c", "x")] == [
        "function_call_output",
        "message",
    ]
    assert [i["type"] for i in a.follow_up_input(6, "c", "x")] == ["function_call_output"]
    assert all(len(a.tool_output(t, "x")) > 2000 for t in range(2, 7))
    with pytest.raises(ValueError):
        a.follow_up_input(7, "c", "x")


def test_quick_run_writes_every_result(tmp_path: Path) -> None:
    out = tmp_path / "results"
    run = subprocess.run(
        [sys.executable, "-m", "bench.loop", "--quick", "--start-stack", "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # Progress: a line per loop run.
    for variant in VARIANTS:
        assert f" {variant} " in run.stdout

    data = json.loads((out / "loop.json").read_text())
    assert data["mode"] == "quick"
    assert {"machine", "params", "cells", "targets", "load", "loops", "date"} <= data.keys()
    assert data["params"]["turns"] == 4
    # Every variant at every tool time, each loop with every turn recorded.
    cells = {(c["variant"], c["tool_ms"]) for c in data["cells"]}
    assert cells == {(v, t) for v in VARIANTS for t in data["params"]["tool_ms"]}
    # Raw turns are stored as columns: one list per field.
    for loop in data["loops"]:
        turns = loop["turns"]
        assert TURN_KEYS <= turns.keys()
        assert turns["turn"] == [1, 2, 3, 4]
        assert turns["answer"] == ["function_call"] * 3 + ["message"]
        assert len(turns["model_ms"]["total_ms"]) == 4
        assert loop["loop_ms"] > 0
    for cell in data["cells"]:
        assert len(cell["per_turn"]["overhead_ms"]) == 4
        assert cell["variant"] == "legacy-http" or "speedup_vs_legacy" in cell
    gateway = [c for c in data["cells"] if c["variant"] != "direct-worker"]
    assert all(c["stages_ms_last_turn"] for c in gateway)
    for target in data["targets"]:
        assert {"name", "target", "measured", "pass", "detail"} <= target.keys()
    load = data["load"]
    assert load["one_connection"]["turns"] and load["concurrent_loops"]["cells"]
    # The capacity sweep: the quick run's 2 loops and its 5, in order, each with its ratio.
    sweep = load["concurrent_loops"]["sweep"]
    assert [p["loops"] for p in sweep["points"]] == [2, 5]
    assert all(p["overhead_ratio"] > 0 for p in sweep["points"])
    assert sweep["max_loops_within_2x"] in (None, 2, 5)

    markdown = (out / "loop.md").read_text()
    assert "## Targets" in markdown and "| connection-ws |" in markdown
    for name in PLOTS:
        assert (out / name).stat().st_size > 1000, name
        assert f"({name})" in markdown


def _cell(variant: str, loop_ms: float, ttft_ms: float) -> dict:
    return {
        "tokens_per_second": 1000.0,
        "tool_ms": 0.0,
        "variant": variant,
        "loop_ms": loop_ms,
        "followup_ttft_ms": ttft_ms,
        "overhead_turn2_ms": None,
    }


def test_headline_targets_report_their_ceiling(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the worker alone is in the run, the TTFT and loop targets say how much any
    pipeline could have gained: the same ratio with zero API time."""
    monkeypatch.syspath_prepend(str(REPO_ROOT))
    from bench.loop.analysis import targets

    cells = [
        _cell("legacy-http", 5000, 200),
        _cell("sprint-http", 4000, 150),
        _cell("connection-ws", 3500, 140),
        _cell("direct-worker", 3000, 100),
    ]
    found = {t["name"].split(",")[0]: t for t in targets(cells, None, [0.0])}
    ttft, loop = found["Follow-up TTFT"], found["End-to-end loop"]
    assert ttft["measured"] == 0.25 and ttft["pass"] is False
    assert "ceiling with zero API time (the worker directly): 50%" in ttft["detail"]
    assert loop["measured"] == 0.3 and loop["pass"] is False
    assert "ceiling with zero API time (the worker directly): 40%" in loop["detail"]
    # (m + 500) / (m + 2000) <= 0.6 for m <= 1.75 s; (m + 50) / (m + 100) <= 0.55 never
    # holds for m above 11.1 ms.
    assert "at most 1.75 s (it is 3.00 s)" in loop["detail"]
    assert "at most 11.11 ms (it is 100.00 ms)" in ttft["detail"]
    # Without the worker-direct variant there is no ceiling to state.
    found = {t["name"].split(",")[0]: t for t in targets(cells[:3], None, [0.0])}
    assert "ceiling" not in found["End-to-end loop"]["detail"]
