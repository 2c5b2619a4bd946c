"""Flame graphs of the stack's processes while the load runs (``--profile DIR``).

py-spy, a sampling profiler, attaches to each process for the length of one cell of the
sweep and writes ``DIR/<process>.svg``. It records native frames too (``--native``: the
gRPC core, the JSON and protobuf extensions), which is where much of a turn's CPU goes,
and for that it pauses the process for each sample: at ``RATE_HZ`` the pauses are a
small cost, but the profiled cell's own numbers are not the run's to compare.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

RATE_HZ = 100


def py_spy() -> str:
    """The py-spy beside this interpreter (the project's environment), else on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    found = str(here) if here.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("--profile needs py-spy (it is in requirements.lock: make venv)")
    return found


class Profiles:
    """One py-spy per process, started by ``start()`` and told to write by ``stop()``."""

    def __init__(self, pids: dict[str, int], out: Path, cell: tuple[int, str]) -> None:
        self.pids = pids
        self.out = out
        self.cell = cell  # (loops at once, transport) of the cell to profile
        self._running: dict[str, subprocess.Popen] = {}

    def start(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        binary = py_spy()
        for name, pid in self.pids.items():
            command = [binary, "record", "--pid", str(pid), "--rate", str(RATE_HZ)]
            command += ["--native", "--format", "flamegraph"]
            command += ["--output", str(self.out / f"{name}.svg")]
            self._running[name] = subprocess.Popen(
                command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )

    def stop(self) -> list[Path]:
        """Stop sampling; py-spy writes its flame graph on SIGINT. The written files."""
        for proc in self._running.values():
            proc.send_signal(signal.SIGINT)
        written = []
        for name, proc in self._running.items():
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            path = self.out / f"{name}.svg"
            if path.exists():
                loops, transport = self.cell
                retitle(path, f"{name}: {loops} agent loops at once over {transport}")
                written.append(path)
            else:
                print(f"py-spy wrote no profile of {name}: {err.strip()[-300:]}", file=sys.stderr)
        self._running.clear()
        return written


_TITLE = re.compile(r'(<text id="title"[^>]*>)[^<]*(</text>)')


def retitle(path: Path, title: str) -> None:
    """Say what was profiled instead of py-spy's own command line (which names this
    machine's paths and the process id)."""
    text = path.read_text()
    caption = f"{title} (py-spy, {RATE_HZ} Hz, native frames)"
    path.write_text(_TITLE.sub(lambda m: m.group(1) + caption + m.group(2), text, count=1))
