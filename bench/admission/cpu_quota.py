"""A stack's processes held to a CPU quota, as a smaller machine would hold them: a cgroup
of the kernel's CPU controller with a CFS quota of ``cores`` times its period (what
`docker run --cpus` and a Kubernetes CPU limit set), every process of the stack moved into
it once started (the processes they start later, a gateway's PDF workers, are born in it).

Why a quota rather than pinning to one core (``taskset``): a quota takes CPU time away
without choosing which core, as a container's limit does, and it leaves the load
generator outside on the whole machine, so it is only the stack that gets smaller. The
period is the kernel's and Docker's default, 100 ms: a stack that spends its quota early
in a period waits for the next, which is what a deployment with a CPU limit sees.

cgroup v2 (``cpu.max`` in a unified hierarchy) or v1 (``cpu.cfs_quota_us`` under the cpu
controller's mount); creating a group needs root. ``QuotaUnavailable`` says why not.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

PERIOD_US = 100_000
V2_ROOT = Path("/sys/fs/cgroup")
V1_ROOT = Path("/sys/fs/cgroup/cpu")


class QuotaUnavailable(RuntimeError):
    """This machine cannot hold processes to a CPU quota here (no controller, no right)."""


class CpuQuota:
    """A cgroup named ``name`` holding ``cores`` cores' worth of CPU time."""

    def __init__(self, name: str, cores: float) -> None:
        if cores <= 0:
            raise ValueError("cores must be > 0")
        self.cores = cores
        self.quota_us = int(cores * PERIOD_US)
        v2 = (V2_ROOT / "cgroup.controllers").exists()
        if v2 and "cpu" in (V2_ROOT / "cgroup.controllers").read_text().split():
            self.path, self.version = V2_ROOT / name, 2
        elif (V1_ROOT / "cpu.cfs_quota_us").exists():
            self.path, self.version = V1_ROOT / name, 1
        else:
            raise QuotaUnavailable("no CPU controller (cgroup v2 cpu.max or v1 cpu.cfs_quota_us)")
        try:
            self.path.mkdir(exist_ok=True)
            if self.version == 2:
                (self.path / "cpu.max").write_text(f"{self.quota_us} {PERIOD_US}\n")
            else:
                (self.path / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
                (self.path / "cpu.cfs_quota_us").write_text(f"{self.quota_us}\n")
        except OSError as exc:
            raise QuotaUnavailable(f"cannot set a CPU quota at {self.path}: {exc}") from None

    def describe(self) -> str:
        return (
            f"{self.cores:g} core(s): CFS quota {self.quota_us} us per {PERIOD_US} us "
            f"(cgroup v{self.version})"
        )

    def add(self, pids: Iterable[int]) -> None:
        """Move each process (all its threads) and its descendants into the group."""
        procs = self.path / "cgroup.procs"
        every = {d for root in pids for d in (root, *descendants(root))}
        for pid in every:
            try:
                procs.write_text(f"{pid}\n")
            except ProcessLookupError:
                continue  # ended meanwhile

    def throttled(self) -> dict[str, float]:
        """Periods in which the group used all its quota, and for how long it waited."""
        stat = dict(
            line.split() for line in (self.path / "cpu.stat").read_text().splitlines() if line
        )
        if self.version == 2:
            return {
                "periods": int(stat.get("nr_periods", 0)),
                "throttled_periods": int(stat.get("nr_throttled", 0)),
                "throttled_s": int(stat.get("throttled_usec", 0)) / 1e6,
            }
        return {
            "periods": int(stat.get("nr_periods", 0)),
            "throttled_periods": int(stat.get("nr_throttled", 0)),
            "throttled_s": int(stat.get("throttled_time", 0)) / 1e9,
        }

    def remove(self) -> None:
        """Remove the group once its processes have ended (those left move to the root)."""
        root = self.path.parent / "cgroup.procs"
        try:
            for pid in (self.path / "cgroup.procs").read_text().split():
                try:
                    root.write_text(f"{pid}\n")
                except OSError:
                    continue
            self.path.rmdir()
        except OSError:
            pass


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
