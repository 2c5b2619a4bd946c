"""`python -m bench.services --quick` end to end: it starts the services it measures, and
writes per-service JSON and Markdown, plots and a README. Checks the outputs' shape, never
the timings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import REPO_ROOT

SERVICES = ("tokenizer", "safety", "worker", "router", "billing")
PLOTS = ("tokenizer_latency.png", "safety_latency.png", "worker_ttft.png")


def summaries(value):
    """Every {median, p90, n} summary inside a measurement, at any depth."""
    if isinstance(value, dict):
        if {"median", "p90", "n"} <= value.keys():
            yield value
        else:
            for inner in value.values():
                yield from summaries(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from summaries(inner)


def rates(value):
    """Every number under a key ending in "_per_s"."""
    if isinstance(value, dict):
        for key, inner in value.items():
            if key.endswith("_per_s") and isinstance(inner, (int, float)):
                yield key, inner
            else:
                yield from rates(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from rates(inner)


def test_service_histories_are_the_agent_loops_rollout(monkeypatch: pytest.MonkeyPatch) -> None:
    """One workload: the service benchmarks' histories are the loop's requests, the
    model's calls chosen by the simulator as in a live loop."""
    monkeypatch.syspath_prepend(str(REPO_ROOT))  # bench/ is not installed, it runs from here
    from bench.loop.rollout import NUDGES, TASK, TOOLS, Rollout, repo_corpus
    from bench.services.history import conversation
    from turnpike.conversation.v1.conversation_pb2 import Item

    conv = conversation(3)
    rollout = Rollout("any-run", repo_corpus(), turns=4)
    assert conv.instructions.endswith(rollout.instructions.split("\n\n", 1)[1])
    assert [t.name for t in conv.tools] == [t["name"] for t in TOOLS]
    kinds = [item.kind for item in conv.items]
    call, output, message = Item.FUNCTION_CALL, Item.FUNCTION_CALL_OUTPUT, Item.MESSAGE
    assert kinds == [message, call, output, message, call, output, message, call, output]
    assert conv.items[0].text == TASK and conv.items[3].text == NUDGES[0]
    calls = [item for item in conv.items if item.kind == call]
    outputs = [item for item in conv.items if item.kind == output]
    for turn, (made, answered) in enumerate(zip(calls, outputs, strict=True), start=2):
        assert {t["name"] for t in TOOLS} >= {made.name}
        assert (answered.call_id, answered.name) == (made.call_id, made.name)
        assert answered.text == rollout.tool_output(turn, made.name)
    assert conv.last_turn == conv.items[-2:]


def test_quick_run_writes_every_result(tmp_path: Path) -> None:
    out = tmp_path / "results"
    run = subprocess.run(
        [sys.executable, "-m", "bench.services", "--quick", "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # Progress: a line per measurement, a closing line per service.
    for service in SERVICES:
        assert f"== {service} done" in run.stdout
    assert "tokenizer full" in run.stdout and "billing grpc replay" in run.stdout

    for service in SERVICES:
        data = json.loads((out / f"{service}.json").read_text())
        assert data["service"] == service
        assert data["mode"] == "quick"
        assert data["date"]
        assert data["machine"]["cpu_count"] >= 1
        assert data["machine"]["python"].startswith("3.")
        assert isinstance(data["params"], dict) and data["params"]
        assert data["measurements"] and data["derived"]
        found = list(summaries(data["measurements"]))
        assert found, f"{service}: no sample summaries"
        for summary in found:
            assert summary["n"] >= 1
            assert 0 < summary["median"] <= summary["p90"], (service, summary)
        for key, value in rates(data["measurements"]):
            assert value > 0, (service, key)
        for plot in data["plots"]:
            assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

        markdown = (out / f"{service}.md").read_text()
        assert markdown.startswith(f"# {data['title']}")
        assert "| ---" in markdown

    tokenizer = json.loads((out / "tokenizer.json").read_text())
    operations = {(m["operation"], m["transport"]) for m in tokenizer["measurements"]}
    assert operations == {(op, tr) for op in ("full", "append") for tr in ("in-process", "grpc")}
    worker = json.loads((out / "worker.json").read_text())
    hits = [m for m in worker["measurements"] if m["kind"] == "ttft"]
    assert hits
    for point in hits:  # a fresh prompt misses; the same prompt again hits the cache
        assert point["miss_cached_tokens"] == 0 < point["hit_cached_tokens"]
    billing = json.loads((out / "billing.json").read_text())
    assert billing["derived"]["totals_unchanged_by_replays"] is True

    for plot in PLOTS:
        assert (out / plot).stat().st_size > 1000
    readme = (out / "README.md").read_text()
    for service in SERVICES:
        title = json.loads((out / f"{service}.json").read_text())["title"]
        assert f"## {title}" in readme
