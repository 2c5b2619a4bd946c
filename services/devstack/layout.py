"""The stack's layout: which processes run, on which host and ports, with which state
folder and extra variables (``StackConfig``, ``ServiceSpec``)."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

BACKENDS = ("safety", "tokenizer", "router", "billing", "imageres")
FIRST_WORKER_PORT = 50061

_REPO_ROOT = Path(__file__).resolve().parents[2]

Kind = Literal["grpc", "http"]


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
