"""The admission benchmarks (`python -m bench.admission.fairness` and `.overload`): their
pure parts (the tenants file, the ledger check, answers by outcome, the capacity figure),
and their quick runs end to end against stacks of their own, checked for sane numbers, not
timings: every request answered, none hung, the flood limited, the shedding stack
rejecting, the ledger exact, the files written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.paths import REPO_ROOT


@pytest.fixture(autouse=True)
def _bench_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO_ROOT))  # bench/ is not installed, it runs from here


# -- pure parts ---------------------------------------------------------------------------


def test_tenants_file_holds_hashes_not_keys() -> None:
    import hashlib

    import yaml

    from bench.admission.common import key_hash, mint_key, tenants_yaml

    a, b = mint_key("a"), mint_key("b")
    assert a != b and a.startswith("sk-bench-a-")
    text = tenants_yaml({"a": (a, {"requests_per_minute": 600}), "b": (b, {})})
    assert a not in text and b not in text
    parsed = yaml.safe_load(text)
    assert parsed == {
        "tenants": {
            "a": {"keys": [key_hash(a)], "requests_per_minute": 600},
            "b": {"keys": [key_hash(b)]},
        }
    }
    assert key_hash("k") == "sha256:" + hashlib.sha256(b"k").hexdigest()


def _shot(outcome: str = "completed", **kw):
    from bench.admission.common import Shot, status_of

    values: dict[str, Any] = {
        "at_s": 0.0,
        "latency_ms": 10.0,
        "status": status_of(outcome),
        "outcome": outcome,
    }
    return Shot(**(values | kw))


def test_answers_by_outcome() -> None:
    from bench.admission.common import by_outcome, status_of

    assert status_of("HTTP 429: rate_limit_exceeded") == 429
    assert status_of("response.failed: worker_error") == 200
    assert status_of("timeout") == status_of("connect failed: OSError") == 0
    shots = [
        _shot("HTTP 429: rate_limit_exceeded", latency_ms=2.0, retry_after="1"),
        _shot("HTTP 429: rate_limit_exceeded", latency_ms=4.0, retry_after="1"),
        _shot("HTTP 429: rate_limit_exceeded", latency_ms=3.0),
        _shot("completed", latency_ms=100.0),
    ]
    found = by_outcome(shots)
    assert list(found) == ["HTTP 429: rate_limit_exceeded", "completed"]  # most first
    limited = found["HTTP 429: rate_limit_exceeded"]
    assert limited["count"] == 3 and limited["status"] == 429
    assert limited["with_retry_after"] == 2 and limited["latency_ms"]["p50"] == 3.0
    # A stream's decode pace: tokens over first delta -> terminal event; delivered: over
    # the whole wait.
    stream = _shot(ttft_ms=500.0, latency_ms=2500.0, output_tokens=2000)
    assert stream.decode_tokens_per_s == 1000 and stream.delivered_tokens_per_s == 800
    assert _shot(output_tokens=2000).decode_tokens_per_s is None  # no delta seen


def test_ledger_check() -> None:
    from bench.admission.common import ledger_check

    billed = {"r0": "a", "r1": "a", "r2": "a", "r3": "b"}
    ok = ledger_check({"A": ["r1", "r2"], "B": ["r3"]}, billed, before={"r0"})
    assert ok["pass"] and ok["ledger_events"] == 3
    assert ok["clients"]["A"] == {
        "completed": 2,
        "billed": 2,
        "missing": 0,
        "missing_ids": [],
        "billed_as": ["a"],
    }
    assert ok["ledger_events_by_tenant"] == {"a": 2, "b": 1}
    # A completed answer not billed, and an event no client saw completed: both fail it.
    lost = ledger_check({"A": ["r1", "r2", "r9"], "B": ["r3"]}, billed, before={"r0"})
    assert not lost["pass"] and lost["clients"]["A"]["missing_ids"] == ["r9"]
    extra = ledger_check({"A": ["r1"], "B": ["r3"]}, billed, before={"r0"})
    assert not extra["pass"] and extra["billed_not_completed_ids"] == ["r2"]


def test_capacity_levels_count_up_from_the_smallest_n() -> None:
    from bench.admission.overload import capacity

    def cell(n: int, delivered: float | None, latency: float, errors: int = 0) -> dict:
        return {
            "streams": n,
            "delivered_p50_vs_alone": delivered,
            "latency_p50_vs_alone": latency,
            "errors": errors,
        }

    sweep = [cell(8, 0.99, 1.0), cell(16, 0.95, 1.05), cell(32, 0.7, 1.4), cell(64, 0.6, 1.7)]
    sweep += [cell(96, 0.5, 2.5), cell(128, 0.95, 1.0)]  # past a miss: not counted
    found = capacity(sweep)
    assert found == {"full_speed": 16, "latency_1.5x": 32, "latency_2x": 64}
    assert capacity(list(reversed(sweep))) == found  # in any order
    assert capacity([cell(8, 0.5, 3.0)]) == dict.fromkeys(found)
    assert capacity([cell(8, 0.99, 1.0), cell(16, 0.99, 1.0, errors=1)])["full_speed"] == 8


def test_a_burst_record_sorts_answers() -> None:
    from bench.admission.overload import run_record

    shots = [
        _shot(latency_ms=3000.0, ttft_ms=1000.0, output_tokens=2000, response_id="r1"),
        _shot(latency_ms=2000.0, ttft_ms=100.0, output_tokens=1900, response_id="r2"),
        _shot("HTTP 503: server_overloaded", latency_ms=20.0, retry_after="1"),
        _shot("timeout", latency_ms=120_000.0),
        _shot("connect failed: OSError", latency_ms=1.0),
    ]
    cost = {"wall_s": 120.0, "gateway_cores": 1.0, "stack_cores": 1.5, "client_cores": 0.2}
    r = run_record("on", 5, shots, cost, alone_ms=2000.0)
    assert (r["admitted"], r["rejected"], r["hung"], r["other"]) == (2, 1, 1, 1)
    assert r["answered"] == 4 and r["rejected_with_retry_after"] == 1
    assert r["admitted_ms"]["p50"] == 2000 and r["admitted_p50_vs_alone"] == 1.0
    assert r["tokens_per_s"]["decode"]["p50"] == 1000  # 2000 tokens in 2 s; 1900 in 1.9 s
    assert r["tokens_per_s"]["delivered"]["p10"] == 666.667  # 2000 tokens in 3 s
    assert r["admitted_series"] == [2000.0, 3000.0] and r["rejected_series"] == [20.0]


# -- end to end ---------------------------------------------------------------------------


def _run(module: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    run = subprocess.run(
        [sys.executable, "-m", module, "--quick", "--out", str(out), *extra],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


def test_fairness_quick_run(tmp_path: Path) -> None:
    run = _run("bench.admission.fairness", tmp_path)
    assert "phase 1, A alone" in run.stdout and "phase 2, A while B floods" in run.stdout
    data = json.loads((tmp_path / "fairness.json").read_text())
    why = run.stdout[-3000:]
    assert data["mode"] == "quick" and [p["phase"] for p in data["phases"]] == ["alone", "flood"]
    for phase in data["phases"]:
        assert phase["turns_ok"] == phase["turns_sent"] > 0, why
        assert phase["error_count"] == 0 and phase["pipelines"] == {"connection": phase["turns_ok"]}
        o = phase["overhead_ms"]
        assert 0 <= o["p50"] <= o["p90"] <= o["p99"], why
        assert len(phase["series"]) == phase["turns_ok"]
    flood = data["flood"]
    # Every request of B's flood answered, none hung, most refused with a 429 that says
    # when to come back; the ones admitted completed.
    assert flood["sent"] == flood["answered"] > 0 and flood["timeouts"] == 0, why
    assert flood["times_limit"] > 10, why
    outcomes = flood["by_outcome"]
    limited = outcomes["HTTP 429: rate_limit_exceeded"]
    assert limited["count"] > 0 and limited["with_retry_after"] == limited["count"], outcomes
    assert set(outcomes) <= {"HTTP 429: rate_limit_exceeded", "completed"}, outcomes
    # The ledger: exactly what the clients saw completed, nothing for a 429.
    ledger = data["ledger"]
    assert ledger["pass"] and ledger["billed_not_completed"] == 0, ledger
    assert ledger["clients"]["A"]["completed"] == sum(p["turns_ok"] for p in data["phases"])
    assert ledger["clients"]["B"]["completed"] == outcomes.get("completed", {}).get("count", 0)
    assert ledger["clients"]["A"]["billed_as"] == ["a"], ledger
    assert ledger["ledger_events"] == sum(c["completed"] for c in ledger["clients"].values())
    assert [t["pass"] for t in data["targets"][1:]] == [True, True, True], data["targets"]

    markdown = (tmp_path / "fairness.md").read_text()
    assert "## Tenant B's answers" in markdown and "## The ledger" in markdown
    assert "HTTP 429: rate_limit_exceeded" in markdown and "(fairness.png)" in markdown
    assert (tmp_path / "fairness.png").stat().st_size > 10_000


def test_overload_quick_run(tmp_path: Path) -> None:
    run = _run("bench.admission.overload", tmp_path)
    assert "capacity sweep" in run.stdout and "shedding adaptive" in run.stdout
    data = json.loads((tmp_path / "overload.json").read_text())
    why = run.stdout[-3000:]
    assert set(data["alone"]) == {"off", "fixed", "adaptive"}
    for reference in data["alone"].values():
        assert reference["completed"] == reference["runs"] == 1, why
        assert reference["output_tokens_mean"] >= 200, why  # asked for 200: written in full
    assert [c["streams"] for c in data["sweep"]] == [2, 4]
    for cell in data["sweep"]:
        assert cell["completed"] == cell["streams"] and cell["errors"] == 0, why
        for kind in ("delivered", "decode"):
            rates = cell["tokens_per_s"][kind]
            assert 0 < rates["p10"] <= rates["p50"], why
    variants, sizes = ("off", "fixed", "adaptive"), (12, 24)
    keys = [(r["variant"], r["requests"], r["burst"]) for r in data["runs"]]
    assert sorted(keys) == sorted((v, n, b) for v in variants for n in sizes for b in (1, 2))
    for r in data["runs"]:
        # Every request answered, none hung; nothing but completions and 503s.
        n = r["requests"]
        assert r["answered"] == n and r["hung"] == 0 and r["other"] == 0, (r, why)
        assert r["admitted"] + r["rejected"] == n, (r, why)
        if r["variant"] == "off":
            assert r["rejected"] == 0 and r["admission_after"]["bound"] == 0, (r, why)
    # At 4 in flight (fixed) and at most 6 (adaptive), 24 at once: each stack streams some
    # and refuses the rest at once, each refusal a 503 that says when to come back.
    for variant, most in (("fixed", 4), ("adaptive", 6)):
        for shed in (r for r in data["runs"] if (r["variant"], r["requests"]) == (variant, 24)):
            assert 1 <= shed["admitted"] <= most and shed["rejected"] > 0, (shed, why)
            overloaded = shed["by_outcome"]["HTTP 503: server_overloaded"]
            assert overloaded["with_retry_after"] == overloaded["count"] == shed["rejected"]
            assert shed["rejected_ms"]["max"] < shed["admitted_ms"]["p50"], shed
    # The adaptive stack reports its bound and the signal it follows.
    after = [r["admission_after"] for r in data["runs"] if r["variant"] == "adaptive"]
    assert all(a["adaptive"] and 2 <= a["bound"] <= a["ceiling"] == 6 for a in after), after
    assert after[-1]["time_to_first_token_ms"] > 0 and after[-1]["baseline_ms"] > 0, after
    fixed = [r["admission_after"] for r in data["runs"] if r["variant"] == "fixed"]
    assert all(not a["adaptive"] and a["bound"] == 4 for a in fixed), fixed

    markdown = (tmp_path / "overload.md").read_text()
    assert "## Capacity: concurrent streams paced at full speed" in markdown
    assert "| adaptive | 24 | 2 |" in markdown and "(overload.png)" in markdown
    assert (tmp_path / "overload.png").stat().st_size > 10_000


def test_overload_under_a_cpu_quota_names_its_results_and_the_quota(tmp_path: Path) -> None:
    """A bounded run of the bench under a CPU quota (where the machine allows one): one
    size, one burst, its own file names, the quota in the report."""
    from bench.admission.cpu_quota import CpuQuota, QuotaUnavailable

    try:
        CpuQuota("turnpike-test-probe", 1.0).remove()
    except QuotaUnavailable as exc:
        pytest.skip(f"no CPU quota here: {exc}")
    _run(
        "bench.admission.overload", tmp_path, "--cpu-quota", "0.5", "--requests", "12",
        "--bursts", "1", "--sweep", "2",
    )  # fmt: skip
    data = json.loads((tmp_path / "overload-cpu-0.5.json").read_text())
    assert data["params"]["cpu_quota"] == 0.5
    throttled = data["cpu_quota"]["throttled"]
    assert set(throttled) == {"off", "fixed", "adaptive"}
    assert all(t["periods"] > 0 for t in throttled.values()), throttled
    assert all(r["hung"] == 0 for r in data["runs"])
    markdown = (tmp_path / "overload-cpu-0.5.md").read_text()
    assert "0.5 core(s): CFS quota 50000 us per 100000 us" in markdown
    assert "(overload-cpu-0.5.png)" in markdown
