"""`make test`: the whole suite, its independent parts side by side.

Most of the suite waits: on processes starting, on simulated model time, on `docker build`.
Run one after the other, a cold `make test` kept two cores about a third busy. So the parts
that do not depend on each other run at once:

    lint        ruff check, ruff format --check, mypy
    images      deploy/images.py (only when a Docker engine answers)
    local       pytest tests/unit tests/stack, on TEST_WORKERS xdist workers; each worker
                starts its own private stack (free ports, its own state folder), and a
                file's tests stay on one worker (--dist loadfile), so a module's fixtures
                are set up once
    containers  pytest tests/containers, once the images are built: in one process, since
                its fixtures bring up a whole Compose project

The local tests print to the terminal; every other step writes a log in var/test/ and a
line when it starts and when it ends (with the log's tail when it fails). The run fails
when any step fails, and when a pytest run ran no test (pytest's exit code 5). The last
line adds up every pytest run: `suite: N passed, N failed, N skipped`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / "var" / "test"
PYTHON = sys.executable
# Workers of the local tests. They mostly wait, so two cores keep three busy; more only
# queue for the CPU (measured: bench/results/issue-21-test-time/).
DEFAULT_WORKERS = 3
NO_TESTS_RAN = 5  # pytest's exit code when it collected nothing


@dataclass
class Step:
    name: str
    log: Path | None = None  # None: the step prints to the terminal
    junit: Path | None = None
    returncode: int | None = None
    seconds: float = 0.0
    note: str = ""
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def say(message: str) -> None:
    print(f"[test] {message}", flush=True)


def tail(path: Path, lines: int = 30) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(text[-lines:])


async def run(step: Step, *commands: Sequence[str]) -> Step:
    """Run ``commands`` one after the other, stopping at the first that fails; their output
    goes to the step's log, or to the terminal when it has none."""
    say(f"{step.name}: started" + (f" (log: {step.log.relative_to(REPO)})" if step.log else ""))
    begin = time.monotonic()
    out = step.log.open("w") if step.log else None
    try:
        for command in commands:
            if out:
                out.write(f"$ {' '.join(command)}\n")
                out.flush()
            proc = await asyncio.create_subprocess_exec(
                *command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT if out else None
            )
            step.returncode = await proc.wait()
            if step.returncode != 0:
                break
    finally:
        if out:
            out.close()
    step.seconds = time.monotonic() - begin
    step.counts = junit_counts(step.junit)
    if step.returncode == NO_TESTS_RAN:
        step.note = "no test ran"
    verdict = "passed" if step.ok else f"FAILED (exit {step.returncode}) {step.note}".rstrip()
    say(f"{step.name}: {verdict} in {step.seconds:.0f} s")
    if not step.ok and step.log:
        print(tail(step.log), flush=True)
    return step


def junit_counts(path: Path | None) -> dict[str, int]:
    if path is None or not path.exists():
        return {}
    root = ET.parse(path).getroot()
    suite = root.find("testsuite") if root.tag == "testsuites" else root
    assert suite is not None
    total, failed, errors, skipped = (
        int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")
    )
    return {
        "passed": total - failed - errors - skipped,
        "failed": failed + errors,
        "skipped": skipped,
    }


def docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def pytest(junit: Path, *args: str) -> list[str]:
    return [PYTHON, "-m", "pytest", f"--junitxml={junit}", *args]


async def suite(workers: int) -> int:
    LOGS.mkdir(parents=True, exist_ok=True)
    begin = time.monotonic()
    with_docker = docker_answers()
    if not with_docker:
        say("no Docker engine answers: the images are not built and the container tests skip")

    lint = Step("lint", log=LOGS / "lint.log")
    images = Step("images", log=LOGS / "images.log")
    local = Step("local tests", junit=LOGS / "local.xml")
    containers = Step("container tests", log=LOGS / "containers.log", junit=LOGS / "containers.xml")
    for step in (local, containers):
        assert step.junit is not None
        step.junit.unlink(missing_ok=True)

    async def images_then_containers() -> None:
        if with_docker:
            await run(images, [PYTHON, "deploy/images.py"])
            if not images.ok:
                containers.returncode, containers.note = 1, "not run: the images failed"
                say(f"{containers.name}: {containers.note}")
                return
        assert containers.junit is not None
        await run(containers, pytest(containers.junit, "tests/containers"))

    local_args = ["tests/unit", "tests/stack"]
    if workers > 1:
        local_args += ["-n", str(workers), "--dist", "loadfile"]
    assert local.junit is not None
    await asyncio.gather(
        run(
            lint,
            [PYTHON, "-m", "ruff", "check", "."],
            [PYTHON, "-m", "ruff", "format", "--check", "."],
            [PYTHON, "-m", "mypy"],
        ),
        run(local, pytest(local.junit, *local_args)),
        images_then_containers(),
    )

    steps = [lint, *([images] if with_docker else []), local, containers]
    say(f"done in {time.monotonic() - begin:.0f} s")
    for step in steps:
        state = "passed" if step.ok else f"FAILED {step.note}".rstrip()
        counts = ", ".join(f"{n} {k}" for k, n in step.counts.items())
        say(f"  {step.name:<16} {state:<10} {step.seconds:6.0f} s  {counts}")
    total = {k: sum(s.counts.get(k, 0) for s in steps) for k in ("passed", "failed", "skipped")}
    print(f"suite: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
    return 0 if all(step.ok for step in steps) else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workers",
        type=int,
        default=int(os.environ.get("TEST_WORKERS") or DEFAULT_WORKERS),
        help=f"xdist workers of the local tests (TEST_WORKERS; default {DEFAULT_WORKERS}; 1: none)",
    )
    args = parser.parse_args(argv)
    return asyncio.run(suite(max(1, args.workers)))


if __name__ == "__main__":
    sys.exit(main())
