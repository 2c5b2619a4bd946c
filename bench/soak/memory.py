"""Resident memory of the stack's processes, sampled, and what the samples say.

The measure is anonymous resident memory (``RssAnon`` in ``/proc/<pid>/status``): the
heap, where a leak shows. Total RSS also counts file-backed pages (shared libraries, mapped
code) that the kernel drops and reloads as other programs need memory, which moves every
process's figure at once for reasons of the machine's, not the stack's. Nothing is
installed for it and a sample costs microseconds. Processes that share a service's port
(``gateway#2``: the processes of one gateway) are summed under the service's name.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

MIB = 1024 * 1024
# After warm-up, memory is flat when the last stretch of samples is within this much of
# the first stretch: the larger of a share and an absolute floor (allocator noise on a
# small process is a few MiB, whatever its size).
FLAT_SHARE = 0.10
FLAT_FLOOR_MIB = 8.0
STRETCH_SHARE = 0.2  # the first and last fifth of the samples after warm-up


def rss_bytes(pid: int) -> int | None:
    """Anonymous resident memory of one process (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def service_of(process: str) -> str:
    return process.split("#", 1)[0]


def sample(pids: dict[str, int]) -> dict[str, float]:
    """MiB per service now; a service whose processes are all gone is left out."""
    out: dict[str, float] = {}
    for name, pid in pids.items():
        rss = rss_bytes(pid)
        if rss is not None:
            service = service_of(name)
            out[service] = out.get(service, 0.0) + rss / MIB
    return {k: round(v, 2) for k, v in sorted(out.items())}


@dataclass(frozen=True)
class Trend:
    """One service's memory after warm-up."""

    service: str
    start_mib: float  # median of the first stretch after warm-up
    end_mib: float  # median of the last stretch
    peak_mib: float  # over the whole run, warm-up included
    slope_mib_per_h: float  # least squares over the samples after warm-up
    flat: bool

    @property
    def growth_mib(self) -> float:
        return round(self.end_mib - self.start_mib, 2)


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB) points, in MiB per hour (0 for under 2)."""
    if len(points) < 2:
        return 0.0
    xs = [x for x, _ in points]
    ys = [y for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    if den == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in points) / den * 3600


def trends(samples: list[dict], warmup_s: float) -> list[Trend]:
    """Per service, from samples ``{"t": seconds, "rss_mib": {service: MiB}}``."""
    services = sorted({s for row in samples for s in row["rss_mib"]})
    out = []
    for service in services:
        series = [
            (row["t"], row["rss_mib"][service]) for row in samples if service in row["rss_mib"]
        ]
        after = [p for p in series if p[0] >= warmup_s] or series
        stretch = max(1, int(len(after) * STRETCH_SHARE))
        start = statistics.median(y for _, y in after[:stretch])
        end = statistics.median(y for _, y in after[-stretch:])
        allowed = max(start * FLAT_SHARE, FLAT_FLOOR_MIB)
        out.append(
            Trend(
                service,
                round(start, 2),
                round(end, 2),
                round(max(y for _, y in series), 2),
                round(slope_per_hour(after), 2),
                end - start <= allowed,
            )
        )
    return out
