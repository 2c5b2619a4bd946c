"""Run the Turnpike services as local processes on loopback.

One ``StackConfig`` describes the layout (host, ports, state folder, extra variables);
``build_env`` turns it into each process's environment, so ``make run`` and the test
fixtures wire services together the same way. ``LocalStack`` starts the gRPC backends,
waits for their health to report SERVING, then starts the gateway and waits for
``GET /readyz`` to answer 200. ``stop()`` ends every process it started.

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
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import grpc
import httpx
from turnpike.grpc_client import check_health

DEV_API_KEY = "sk-turnpike-dev"
DEFAULT_API_KEYS = f"{DEV_API_KEY}:dev"
BACKENDS = ("safety", "tokenizer", "router", "billing", "imageres")
FIRST_WORKER_PORT = 50061

_REPO_ROOT = Path(__file__).resolve().parents[2]

Kind = Literal["grpc", "http"]

# A fresh probe channel per attempt, so a service that starts late is seen at once
# instead of after gRPC's reconnect backoff.
_PROBE_INTERVAL_S = 0.1
_TAIL_LINES = 30


class StackError(RuntimeError):
    """The stack could not start, or a process of it died."""


def project_root() -> Path:
    """The repository (where ``make run`` runs), or the working folder when installed
    elsewhere."""
    return _REPO_ROOT if (_REPO_ROOT / "pyproject.toml").is_file() else Path.cwd()


def default_state_dir() -> Path:
    return project_root() / "var"


def default_worker_ports(count: int, first: int = FIRST_WORKER_PORT) -> tuple[int, ...]:
    return tuple(first + i for i in range(count))


def pick_free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports the OS reports free right now (all held open together,
    so none is handed out twice)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@dataclass(frozen=True)
class StackConfig:
    host: str = "127.0.0.1"
    gateway_port: int = 8080
    safety_port: int = 50051
    tokenizer_port: int = 50052
    router_port: int = 50053
    billing_port: int = 50054
    imageres_port: int = 50055
    worker_ports: tuple[int, ...] = default_worker_ports(2)
    state_dir: Path = field(default_factory=default_state_dir)
    # Set in every process, over the stack's own wiring (but not over a process's
    # identity: its port, worker id and telemetry service name).
    extra_env: Mapping[str, str] = field(default_factory=dict)
    # make run passes the caller's TURNPIKE_* settings through; tests turn this off so
    # a developer's shell cannot change the stack under test.
    inherit_turnpike_env: bool = True
    startup_timeout_s: float = 90.0
    stop_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "state_dir", Path(self.state_dir).resolve())
        object.__setattr__(self, "worker_ports", tuple(self.worker_ports))
        if not self.worker_ports:
            raise ValueError("the stack needs at least one worker")
        ports = self.ports()
        if len(set(ports.values())) != len(ports):
            raise ValueError(f"two services share a port: {ports}")

    @classmethod
    def on_free_ports(cls, workers: int = 2, host: str = "127.0.0.1", **kwargs) -> StackConfig:
        """A layout on ports the OS reports free, away from ``make run``'s defaults."""
        ports = pick_free_ports(1 + len(BACKENDS) + workers, host)
        named = {f"{svc}_port": port for svc, port in zip(BACKENDS, ports[1:], strict=False)}
        return cls(
            host=host,
            gateway_port=ports[0],
            worker_ports=tuple(ports[1 + len(BACKENDS) :]),
            **named,
            **kwargs,
        )

    def shifted(self, offset: int) -> StackConfig:
        """Every port moved by ``offset`` (to run a second stack beside the first)."""
        named = {f"{svc}_port": port + offset for svc, port in self.backend_ports().items()}
        return replace(
            self,
            gateway_port=self.gateway_port + offset,
            worker_ports=tuple(port + offset for port in self.worker_ports),
            **named,
        )

    def backend_ports(self) -> dict[str, int]:
        return {svc: getattr(self, f"{svc}_port") for svc in BACKENDS}

    @property
    def worker_ids(self) -> list[str]:
        return [f"worker-{i}" for i in range(1, len(self.worker_ports) + 1)]

    def worker_addresses(self) -> dict[str, str]:
        return {
            wid: self.address(port)
            for wid, port in zip(self.worker_ids, self.worker_ports, strict=True)
        }

    def ports(self) -> dict[str, int]:
        """Every process's port by process name."""
        return {
            "gateway": self.gateway_port,
            **self.backend_ports(),
            **dict(zip(self.worker_ids, self.worker_ports, strict=True)),
        }

    def address(self, port: int) -> str:
        return f"{self.host}:{port}"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.gateway_port}/v1"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "logs"

    @property
    def ledger_path(self) -> Path:
        return self.state_dir / "billing" / "ledger.sqlite3"

    @property
    def vocab_dir(self) -> Path:
        return self.state_dir / "vocab"


@dataclass(frozen=True)
class ServiceSpec:
    """One process of the stack: ``python -m <module>``, ready when its gRPC health
    reports SERVING (``grpc``) or ``GET /readyz`` answers 200 (``http``)."""

    name: str
    module: str
    port: int
    kind: Kind = "grpc"
    env: Mapping[str, str] = field(default_factory=dict)


def default_services(config: StackConfig) -> list[ServiceSpec]:
    services = [ServiceSpec(svc, svc, port) for svc, port in config.backend_ports().items()]
    for wid, port in zip(config.worker_ids, config.worker_ports, strict=True):
        identity = {"TURNPIKE_WORKER_ID": wid, "TURNPIKE_WORKER_PORT": str(port)}
        services.append(ServiceSpec(wid, "worker", port, env=identity))
    services.append(ServiceSpec("gateway", "gateway", config.gateway_port, "http"))
    return services


def stack_env(config: StackConfig) -> dict[str, str]:
    """The wiring every process shares: where each service listens, and the state folder."""
    env = {
        "PYTHONUNBUFFERED": "1",
        "TURNPIKE_GRPC_HOST": config.host,
        "TURNPIKE_GATEWAY_HOST": config.host,
        "TURNPIKE_GATEWAY_PORT": str(config.gateway_port),
        "TURNPIKE_WORKERS": ",".join(f"{w}={a}" for w, a in config.worker_addresses().items()),
        "TURNPIKE_BILLING_LEDGER": str(config.ledger_path),
        "TURNPIKE_VOCAB_DIR": str(config.vocab_dir),
        # A development stack lets benchmarks pick a pipeline per request.
        "TURNPIKE_ALLOW_PIPELINE_OVERRIDE": "true",
    }
    for svc, port in config.backend_ports().items():
        env[f"TURNPIKE_{svc.upper()}_PORT"] = str(port)
        env[f"TURNPIKE_{svc.upper()}_ADDR"] = config.address(port)
    return env


def build_env(
    config: StackConfig, spec: ServiceSpec, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A process's environment. Precedence, lowest first: the caller's environment
    (OTEL_* included; TURNPIKE_* only if ``inherit_turnpike_env``), the stack's wiring,
    ``config.extra_env``, then the process's identity."""
    environ = os.environ if environ is None else environ
    env = {
        key: value
        for key, value in environ.items()
        if config.inherit_turnpike_env or not key.startswith("TURNPIKE_")
    }
    env.update(stack_env(config))
    env.update(config.extra_env)
    # One trace service per program; replicas (worker-1, worker-2) told apart by instance.
    env["OTEL_SERVICE_NAME"] = spec.module
    attributes = [env.get("OTEL_RESOURCE_ATTRIBUTES", ""), f"service.instance.id={spec.name}"]
    env["OTEL_RESOURCE_ATTRIBUTES"] = ",".join(a for a in attributes if a)
    env.update(spec.env)
    return env


def parse_api_keys(raw: str) -> dict[str, str]:
    """``"key:tenant,..."`` -> {tenant: key}, in the given order."""
    keys: dict[str, str] = {}
    for pair in raw.split(","):
        key, _, tenant = pair.strip().partition(":")
        if key:
            keys.setdefault(tenant or key, key)
    return keys


@dataclass(frozen=True)
class StackEndpoints:
    """Where a running stack can be reached."""

    base_url: str  # http://host:port/v1 (the SDK's base_url)
    ws_url: str  # ws://host:port/v1/responses (the WebSocket endpoint itself)
    ws_base_url: str  # ws://host:port/v1 (the SDK's websocket_base_url)
    api_key: str  # the first configured key (sk-turnpike-dev unless overridden)
    api_keys: dict[str, str]  # tenant -> key
    gateway: str
    safety: str
    tokenizer: str
    router: str
    billing: str
    imageres: str
    workers: dict[str, str]  # worker id -> address
    state_dir: Path
    log_dir: Path
    ledger_path: Path
    # Gateway size limits when the stack sets them (None: the gateway's own default).
    max_body_bytes: int | None = None
    max_frame_bytes: int | None = None


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
        cfg = self.config
        gateway_env = build_env(cfg, ServiceSpec("gateway", "gateway", cfg.gateway_port, "http"))
        keys = parse_api_keys(gateway_env.get("TURNPIKE_API_KEYS") or DEFAULT_API_KEYS)

        def limit(name: str) -> int | None:
            raw = gateway_env.get(name)
            return int(raw) if raw else None

        ws_base = f"ws://{cfg.host}:{cfg.gateway_port}/v1"
        return StackEndpoints(
            base_url=cfg.base_url,
            ws_url=f"{ws_base}/responses",
            ws_base_url=ws_base,
            api_key=next(iter(keys.values()), DEV_API_KEY),
            api_keys=keys,
            gateway=cfg.address(cfg.gateway_port),
            workers=cfg.worker_addresses(),
            state_dir=cfg.state_dir,
            log_dir=cfg.log_dir,
            ledger_path=cfg.ledger_path,
            max_body_bytes=limit("TURNPIKE_MAX_BODY_BYTES"),
            max_frame_bytes=limit("TURNPIKE_MAX_FRAME_BYTES"),
            **{svc: cfg.address(port) for svc, port in cfg.backend_ports().items()},
        )

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
                cwd=project_root(),
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
