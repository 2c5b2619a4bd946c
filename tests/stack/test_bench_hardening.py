"""The hardening benchmarks end to end, bounded: `python -m bench.access_log_cost` and
`python -m bench.pdf_extraction` (the gateway's PDF pool only, capped) write their tables.
Checks the outputs' shape, never the timings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from support.paths import REPO_ROOT


def run(*args: str) -> None:
    subprocess.run([sys.executable, "-m", *args], cwd=REPO_ROOT, check=True, timeout=240)


def test_the_access_log_cost_benchmark_writes_its_table(tmp_path: Path) -> None:
    run("bench.access_log_cost", "--calls", "200", "--repeats", "2", "--out", str(tmp_path))
    data = json.loads((tmp_path / "access-log-cost.json").read_text())
    assert set(data["us_per_request"]) == {"line on", "line off"}
    assert all(len(v) == 2 and min(v) > 0 for v in data["us_per_request"].values())
    assert "| line on |" in (tmp_path / "access-log-cost.md").read_text()


def test_the_pdf_benchmark_writes_its_table(tmp_path: Path) -> None:
    run("bench.pdf_extraction", "--only", "gateway-pool", "--cap", "20", "--out", str(tmp_path))
    table = (tmp_path / "pdf-extraction.md").read_text()
    assert "gateway-pool" in table or "gateway pool" in table
    assert json.loads((tmp_path / "pdf-extraction.json").read_text())
