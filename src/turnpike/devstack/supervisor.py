"""Run the Turnpike services as local processes on loopback.

``LocalStack`` starts the gRPC backends, waits for their health to report SERVING, then
starts the gateway and waits for ``GET /readyz`` to answer 200. ``stop()`` ends every
process it started.

Each process runs in its own session (process group): a Ctrl-C in the terminal reaches
only the launcher, which then stops the gateway before the backends it depends on, and
a process's own children go down with it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx

from turnpike.devstack.environment import StackEndpoints, build_env, stack_endpoints
from turnpike.devstack.layout import ServiceSpec, StackConfig, default_services
from turnpike.grpc_client import check_health

# A fresh probe channel per attempt, so a service that starts late is seen at once
# instead of after gRPC's reconnect backoff.
_PROBE_INTERVAL_S = 0.1
_TAIL_LINES = 30


class StackError(RuntimeError):
    """The stack could not start, or a process of it died."""


@dataclass(frozen=True)
class ExitedProcess:
    name: str
    module: str
    returncode: int
    log_path: Path
    tail: str

    def describe(self, when: str) -> str:
        return (
            f"{self.name} (python -m {self.module}) exited with code {self.returncode} {when}."
            f"\nLast lines of {self.log_path}:\n{self.tail}"
        )


@dataclass
class _Process:
    spec: ServiceSpec
    popen: subprocess.Popen
    log_path: Path


class LocalStack:
    """The stack's processes. ``start()`` blocks until everything is ready (or raises
    ``StackError`` after stopping what it started); ``stop()`` is idempotent. Usable as
    a context manager. ``services`` replaces the real service list (tests use stand-ins);
    start order is every ``grpc`` service together, then every ``http`` one."""

    def __init__(
        self,
        config: StackConfig | None = None,
        services: Sequence[ServiceSpec] | None = None,
        python: str = sys.executable,
    ) -> None:
        self.config = config or StackConfig()
        self.services = list(services) if services is not None else default_services(self.config)
        names = [spec.name for spec in self.services]
        if len(set(names)) != len(names):
            raise ValueError(f"service names must be unique: {names}")
        if unknown := [spec.name for spec in self.services if spec.kind not in ("grpc", "http")]:
            raise ValueError(f"unknown service kind for {unknown}")
        self.python = python
        self.ready_after_s: float | None = None
        self._processes: dict[str, _Process] = {}
        self._started = False

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        if self._started:
            raise RuntimeError("a LocalStack starts once; create a new one")
        self._started = True
        check_ports_free(self.config.host, {spec.name: spec.port for spec in self.services})
        for folder in (self.config.log_dir, self.config.ledger_path.parent, self.config.vocab_dir):
            folder.mkdir(parents=True, exist_ok=True)
        begin = time.monotonic()
        deadline = begin + self.config.startup_timeout_s
        atexit.register(self.stop)
        try:
            for kind in ("grpc", "http"):
                group = [spec for spec in self.services if spec.kind == kind]
                for spec in group:
                    self._spawn(spec)
                _run_sync(self._wait_ready(group, deadline))
        except BaseException:
            self.stop()
            raise
        self.ready_after_s = time.monotonic() - begin

    def stop(self) -> None:
        """SIGTERM the gateway(s), wait, then the backends; SIGKILL whatever outlives
        ``stop_timeout_s`` in each step. Every process group is emptied."""
        atexit.unregister(self.stop)
        for kind in ("http", "grpc"):
            group = [p for p in self._processes.values() if p.spec.kind == kind]
            _terminate(group, self.config.stop_timeout_s)

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- inspection ----------------------------------------------------------------

    @property
    def pids(self) -> dict[str, int]:
        return {name: p.popen.pid for name, p in self._processes.items()}

    def returncode(self, name: str) -> int | None:
        return _exit_status(self._processes[name].popen)

    def exited(self) -> list[ExitedProcess]:
        """Processes that have ended (while the stack should be running, a failure)."""
        gone = []
        for name, proc in self._processes.items():
            code = _exit_status(proc.popen)
            if code is not None:
                gone.append(
                    ExitedProcess(name, proc.spec.module, code, proc.log_path, self.tail(name))
                )
        return gone

    def log_path(self, name: str) -> Path:
        return self.config.log_dir / f"{name}.log"

    def tail(self, name: str, lines: int = _TAIL_LINES) -> str:
        return tail_file(self.log_path(name), lines)

    @property
    def endpoints(self) -> StackEndpoints:
        return stack_endpoints(self.config)

    # -- internals -----------------------------------------------------------------

    def _spawn(self, spec: ServiceSpec) -> None:
        log_path = self.log_path(spec.name)
        with log_path.open("wb") as log:
            header = f"--- devstack: python -m {spec.module} as {spec.name}, port {spec.port}\n"
            log.write(header.encode())
            log.flush()
            popen = subprocess.Popen(
                [self.python, "-m", spec.module],
                env=build_env(self.config, spec),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._processes[spec.name] = _Process(spec, popen, log_path)

    async def _wait_ready(self, specs: list[ServiceSpec], deadline: float) -> None:
        pending = list(specs)
        async with httpx.AsyncClient(trust_env=False) as http:
            while pending:
                for spec in pending:
                    self._raise_if_exited(spec.name)
                timeout = max(0.2, min(1.0, deadline - time.monotonic()))
                ready = await asyncio.gather(
                    *(self._probe(spec, http, timeout) for spec in pending)
                )
                pending = [spec for spec, ok in zip(pending, ready, strict=True) if not ok]
                if not pending:
                    return
                if time.monotonic() >= deadline:
                    raise StackError(self._not_ready_message(pending))
                await asyncio.sleep(_PROBE_INTERVAL_S)

    async def _probe(self, spec: ServiceSpec, http: httpx.AsyncClient, wait_s: float) -> bool:
        address = self.config.address(spec.port)
        if spec.kind == "grpc":
            async with grpc.aio.insecure_channel(address) as channel:
                return await check_health(channel, timeout=wait_s)
        try:
            reply = await http.get(f"http://{address}/readyz", timeout=wait_s)
        except httpx.HTTPError:
            return False
        return reply.status_code == 200

    def _raise_if_exited(self, name: str) -> None:
        for gone in self.exited():
            if gone.name == name:
                raise StackError(gone.describe("during startup"))

    def _not_ready_message(self, pending: list[ServiceSpec]) -> str:
        what = {"grpc": "gRPC health never reported SERVING", "http": "GET /readyz never gave 200"}
        parts = [f"not ready after {self.config.startup_timeout_s:g} s:"]
        for spec in pending:
            parts.append(
                f"{spec.name} on {self.config.address(spec.port)} ({what[spec.kind]})."
                f"\nLast lines of {self.log_path(spec.name)}:\n{self.tail(spec.name, 15)}"
            )
        return "\n".join(parts)


def check_ports_free(host: str, ports: Mapping[str, int]) -> None:
    """Fail, naming the port and its service, if something already listens there
    (gRPC binds with SO_REUSEPORT, so a second stack would otherwise share ports)."""
    for name, port in ports.items():
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            # Like the servers themselves: a port in TIME_WAIT counts as free.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                raise StackError(
                    f"port {port} ({name}) on {host} is already in use ({exc.strerror}). "
                    "Stop whatever holds it (another `make run`?) or choose other ports "
                    "(--port-base / --gateway-port)."
                ) from exc


def tail_file(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        with path.open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 16_384))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


def _exit_status(popen: subprocess.Popen) -> int | None:
    """The exit code if the process has ended, WITHOUT reaping it: an unreaped
    leader keeps its process-group id reserved, so the group can still be signalled
    safely to clear out children it left behind."""
    if popen.returncode is not None:
        return popen.returncode
    try:
        info = os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return popen.poll()
    if info is None:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def _signal_group(popen: subprocess.Popen, sig: signal.Signals) -> None:
    if popen.returncode is not None:
        return  # reaped: its group id may already belong to someone else
    try:
        os.killpg(popen.pid, sig)
    except ProcessLookupError:
        pass


def _terminate(processes: Iterable[_Process], timeout_s: float) -> None:
    processes = list(processes)
    for proc in processes:
        _signal_group(proc.popen, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for proc in processes:
        while _exit_status(proc.popen) is None and time.monotonic() < deadline:
            time.sleep(0.02)
        # The leader is gone (or out of time): empty its group, then reap it.
        _signal_group(proc.popen, signal.SIGKILL)
        proc.popen.wait()


def _run_sync(coro):
    """Run a coroutine to completion from synchronous code, even when the caller
    itself runs inside an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
