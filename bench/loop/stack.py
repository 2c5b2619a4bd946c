"""The stack under test: one already running (``make run``) or one started here, and the
CPU time its processes spend (Linux ``/proc``), so a result can say which service the
time went to."""

from __future__ import annotations

import argparse
import os
import shutil
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from bench.services.common import log
from turnpike.devstack import LocalStack, StackConfig

# Where `make run` puts everything (devstack's defaults).
DEFAULT = StackConfig()
DEFAULT_BASE_URL = DEFAULT.base_url
DEFAULT_ROUTER = DEFAULT.address(DEFAULT.port("router"))


class StackMissing(RuntimeError):
    pass


@dataclass
class Target:
    base_url: str
    api_key: str
    router: str  # the router's gRPC address (the direct variant asks it for a worker)
    description: str
    pids: dict[str, int] = field(default_factory=dict)  # process name -> pid, when known
    local: LocalStack | None = None
    state_dir: Path | None = None

    def stop(self) -> None:
        """Stop the stack started here, if any, and remove its state folder."""
        if self.local is not None:
            self.local.stop()
            self.local = None
        if self.state_dir is not None:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            self.state_dir = None


def run_parser(prog: str, description: str, out: Path, quick: str) -> argparse.ArgumentParser:
    """A parser with the options every benchmark of the whole stack takes: a smoke run
    (``quick`` says what it runs), which stack (the one `make run` started, or one of its
    own), and where the results go."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {quick}")
    parser.add_argument(
        "--start-stack", action="store_true", help="start a stack on free ports for the run"
    )
    parser.add_argument(
        "--stack-env",
        type=_setting,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="with --start-stack: a setting for every process of that stack (repeatable), "
        "e.g. TURNPIKE_ACCESS_LOG=false to measure a variant",
    )
    parser.add_argument("--out", type=Path, default=out, help="results folder")
    parser.add_argument("--base-url", default=DEFAULT_BASE_URL, help="the gateway's /v1 URL")
    parser.add_argument(
        "--api-key", default=os.environ.get("TURNPIKE_BENCH_API_KEY", "sk-turnpike-dev")
    )
    return parser


def _setting(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def target_from(args: argparse.Namespace, router: str, command: str) -> Target:
    """A stack started here (``--start-stack``) or the running one the arguments name;
    ``StackMissing`` (saying how to run ``command``) when there is none."""
    if args.start_stack:
        log("starting a stack on free ports")
        return start_local(dict(args.stack_env))
    return running(args.base_url, args.api_key, router, command)


def root_of(base_url: str) -> str:
    parts = urlsplit(base_url)
    return f"{parts.scheme}://{parts.netloc}"


def check_ready(base_url: str, timeout_s: float = 3.0, command: str = "make bench") -> None:
    url = root_of(base_url) + "/readyz"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            if reply.status == 200:
                return
            problem = f"answered {reply.status}"
    except urllib.error.HTTPError as exc:
        problem = f"answered {exc.code}"
    except (urllib.error.URLError, OSError) as exc:
        problem = f"did not answer ({getattr(exc, 'reason', exc)})"
    raise StackMissing(
        f"No ready Turnpike stack at {url}: it {problem}.\n"
        "Start one in another terminal with `make run` (and wait for its banner), then run "
        f"`{command}` again; or let the benchmark start its own stack on free ports with "
        f"`{command} BENCH_ARGS=--start-stack`."
    )


def running(base_url: str, api_key: str, router: str, command: str = "make bench") -> Target:
    check_ready(base_url, command=command)
    target = Target(base_url, api_key, router, f"running stack at {root_of(base_url)}")
    target.pids = pids_listening(_ports_of(base_url, router))
    return target


def start_local(extra_env: Mapping[str, str] | None = None) -> Target:
    """A fresh private stack (``StackConfig.private``; devstack's own wiring allows the
    pipeline header), every process given ``extra_env`` too."""
    local = LocalStack(StackConfig.private(extra_env=extra_env))
    local.start()
    ep = local.endpoints
    return Target(
        ep.base_url,
        ep.api_key,
        ep.router,
        f"stack started by the benchmark on free ports (ready in {local.ready_after_s:.1f} s)",
        pids=dict(local.pids),
        local=local,
        state_dir=local.config.state_dir,
    )


# -- CPU accounting ----------------------------------------------------------------------


def _ports_of(base_url: str, router: str) -> dict[int, str]:
    """Ports of `make run`'s processes: the gateway's from the URL, the rest devstack's
    defaults (the router's from ``router``)."""
    ports = {urlsplit(base_url).port or 80: "gateway"}
    for name, port in DEFAULT.ports().items():
        if name != "gateway":
            ports[port] = name
    ports[int(router.rsplit(":", 1)[1])] = "router"
    return ports


def pids_listening(ports: dict[int, str]) -> dict[str, int]:
    """Which processes listen on each port (best effort: empty where /proc says nothing).
    Several processes may share one listening socket (a gateway's processes): the first is
    named for the port, the others ``<name>#2``, ``<name>#3``..., counted with it."""
    try:
        inodes: dict[str, str] = {}
        for table in ("/proc/net/tcp", "/proc/net/tcp6"):
            if not os.path.exists(table):
                continue
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    port = int(cols[1].rsplit(":", 1)[1], 16)
                    if cols[3] == "0A" and port in ports:  # LISTEN
                        inodes[cols[9]] = ports[port]
        holders: dict[str, set[int]] = {}
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                for fd in os.listdir(f"/proc/{pid}/fd"):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:[") and link[8:-1] in inodes:
                        holders.setdefault(inodes[link[8:-1]], set()).add(int(pid))
            except OSError:
                continue
        found: dict[str, int] = {}
        for name, pids in holders.items():
            for i, holder in enumerate(sorted(pids)):
                found[name if i == 0 else f"{name}#{i + 1}"] = holder
        return found
    except OSError:
        return {}


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of one process so far (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds spent by the stack's processes between ``start()`` and ``stop()``."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._start: dict[str, float] = {}

    def start(self) -> None:
        self._start = {name: cpu_seconds(pid) or 0.0 for name, pid in self.pids.items()}

    def stop(self) -> dict[str, float]:
        """Milliseconds of CPU per service: the workers summed as "worker", and the
        processes sharing a service's port (``gateway#2``) with it."""
        spent: dict[str, float] = {}
        for name, pid in self.pids.items():
            now = cpu_seconds(pid)
            if now is None:
                continue
            key = "worker" if name.startswith("worker") else name.split("#")[0]
            spent[key] = spent.get(key, 0.0) + (now - self._start.get(name, now)) * 1000
        return spent
