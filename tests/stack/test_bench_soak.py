"""The soak benchmark (bench/soak): its memory sampling and verdict, its pacer, and a
bounded run against a stack of its own (the full run is `make soak`)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from support.paths import REPO_ROOT


@pytest.fixture(autouse=True)
def _bench_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO_ROOT))  # bench/ is not installed, it runs from here


def test_rss_of_a_live_process_and_of_a_gone_one() -> None:
    from bench.soak.memory import rss_bytes

    rss = rss_bytes(os.getpid())
    assert rss is not None and rss > 1024 * 1024
    assert rss_bytes(2**22 + 12345) is None


def test_processes_of_one_service_are_summed() -> None:
    from bench.soak.memory import sample

    me = os.getpid()
    alone = sample({"gateway": me})["gateway"]
    both = sample({"gateway": me, "gateway#2": me, "router": me})
    assert both["gateway"] == pytest.approx(2 * alone, rel=0.05)
    assert set(both) == {"gateway", "router"}


def _rows(values: Sequence[float], service: str = "gateway", every: float = 5.0) -> list[dict]:
    return [{"t": i * every, "rss_mib": {service: v}} for i, v in enumerate(values)]


def test_growth_during_warm_up_is_not_judged() -> None:
    from bench.soak.memory import trends

    rising_then_flat = [50 + 5 * i for i in range(20)] + [150.0] * 80
    (trend,) = trends(_rows(rising_then_flat), warmup_s=100.0)
    assert trend.flat and trend.growth_mib == 0.0
    assert trend.peak_mib == 150.0
    assert trend.slope_mib_per_h == 0.0


def test_steady_growth_after_warm_up_is_found() -> None:
    from bench.soak.memory import trends

    leaking = [100 + 0.5 * i for i in range(200)]  # 0.5 MiB per 5 s: 360 MiB an hour
    (trend,) = trends(_rows(leaking), warmup_s=100.0)
    assert not trend.flat
    assert trend.slope_mib_per_h == pytest.approx(360.0, rel=0.01)


def test_noise_within_the_allowance_is_flat() -> None:
    from bench.soak.memory import trends

    noisy = [200 + (3 if i % 2 else -3) for i in range(100)]
    (trend,) = trends(_rows(noisy), warmup_s=50.0)
    assert trend.flat


def test_slope_of_too_few_points_is_zero() -> None:
    from bench.soak.memory import slope_per_hour

    assert slope_per_hour([]) == 0.0
    assert slope_per_hour([(0.0, 1.0)]) == 0.0
    assert slope_per_hour([(0.0, 1.0), (3600.0, 11.0)]) == pytest.approx(10.0)


async def test_pacer_spaces_slots_and_does_not_burst_after_a_pause() -> None:
    from bench.soak.load import Pacer

    pacer = Pacer(rate_per_s=100.0)
    start = time.monotonic()
    for _ in range(5):
        await pacer.wait()
    assert time.monotonic() - start >= 4 * 0.01 * 0.9
    await asyncio.sleep(0.2)  # 20 slots missed while every loop was busy
    start = time.monotonic()
    for _ in range(3):
        await pacer.wait()
    # Not made up in a burst: three slots take about two intervals again.
    assert time.monotonic() - start >= 2 * 0.01 * 0.9


def test_bounded_run_against_its_own_stack(tmp_path: Path) -> None:
    from bench.soak.__main__ import main

    out = tmp_path / "soak"
    argv = ["--duration", "12", "--warmup", "4", "--interval", "1", "--rate", "8"]
    argv += ["--loops", "2", "--turns", "3", "--out", str(out)]
    code = main(argv)
    data = json.loads((out / "soak.json").read_text())
    assert {p.name for p in out.iterdir()} == {"soak.json", "soak.md", "soak.png"}
    services = {t["service"] for t in data["trends"]}
    assert {"gateway", "safety", "tokenizer", "router", "billing", "imageres"} <= services
    assert any(s.startswith("worker") for s in services)
    assert len(data["samples"]) >= 5
    transports = data["transports"]
    assert set(transports) == {"websocket", "http"}
    assert all(t["turns_ok"] > 0 and not t["errors"] for t in transports.values())
    assert data["params"]["bounds"]["TURNPIKE_STORE_MAX_RESPONSES"] == "2000"
    assert "| gateway |" in (out / "soak.md").read_text()
    # A short run judges little; the exit code still says whether it saw growth or errors.
    assert code == (0 if all(t["flat"] for t in data["trends"]) else 1)


def test_warm_up_lasts_until_the_store_has_filled() -> None:
    from bench.soak.__main__ import SMALL_BOUNDS, parse_args, warmup_s

    ten_minutes = parse_args(["--duration", "600", "--rate", "10"])
    assert warmup_s(ten_minutes, SMALL_BOUNDS) == 300.0  # 2,000 responses at 10/s, x1.5
    assert warmup_s(ten_minutes, {}) == 120.0  # a running stack: its bounds are unknown
    half_hour = parse_args(["--duration", "1800"])
    assert warmup_s(half_hour, SMALL_BOUNDS) == 360.0
    given = parse_args(["--duration", "600", "--warmup", "30"])
    assert warmup_s(given, SMALL_BOUNDS) == 30.0


def test_command_line_leaves_out_the_note_and_the_folder() -> None:
    from bench.soak.__main__ import command_line

    assert command_line([]) == "make soak"
    argv = ["--duration", "1800", "--note", "busy", "--out", "x/y", "--out=z"]
    assert command_line(argv) == "make soak BENCH_ARGS='--duration 1800'"
