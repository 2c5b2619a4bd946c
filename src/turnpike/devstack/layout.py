"""The stack's layout: which processes run, on which host and ports, with which state
folder and extra variables (``StackConfig``, ``ServiceSpec``)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from turnpike.catalogue import (
    BACKENDS,
    GATEWAY,
    LOOPBACK,
    SERVICES,
    WORKER,
    Service,
    ServiceProtocol,
    loopback_workers,
)
from turnpike.config import default_state_dir, ledger_path_in, vocab_dir_in
from turnpike.devstack.ports import pick_free_ports

# The processes of one of each service (the workers are numbered: worker-1, worker-2...).
SINGLE_SERVICES = tuple(s for s in SERVICES if s is not WORKER)


@dataclass(frozen=True)
class StackConfig:
    """Where a local stack runs: its host, every process's port, its state folder and
    what every process is told beyond the stack's own wiring. The default is ``make
    run``'s layout; ``private()`` one that shares nothing with it."""

    host: str = LOOPBACK
    # Port by service name, for every service but the workers (default: the catalogue's).
    service_ports: Mapping[str, int] = field(
        default_factory=lambda: {s.name: s.port for s in SINGLE_SERVICES}
    )
    # Port by worker id (worker-1, worker-2, ...).
    workers: Mapping[str, int] = field(default_factory=lambda: loopback_workers(2))
    # Where each process serves /metrics, by process name (default: the catalogue's
    # metrics ports, worker-N on the N-th port from the workers' own).
    metrics_ports: Mapping[str, int] | None = None
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
        object.__setattr__(self, "service_ports", dict(self.service_ports))
        object.__setattr__(self, "workers", dict(self.workers))
        expected = {s.name for s in SINGLE_SERVICES}
        if set(self.service_ports) != expected:
            raise ValueError(f"service_ports must name exactly {sorted(expected)}")
        if not self.workers:
            raise ValueError("the stack needs at least one worker")
        if self.metrics_ports is None:
            defaults = {s.name: s.metrics_port for s in SINGLE_SERVICES}
            for index, wid in enumerate(self.workers):
                defaults[wid] = WORKER.metrics_port + index
            object.__setattr__(self, "metrics_ports", defaults)
        else:
            object.__setattr__(self, "metrics_ports", dict(self.metrics_ports))
        assert self.metrics_ports is not None
        if set(self.metrics_ports) != set(self.ports()):
            raise ValueError("metrics_ports must name every process")
        taken = [*self.ports().values(), *self.metrics_ports.values()]
        if len(set(taken)) != len(taken):
            raise ValueError(f"two services share a port: {self.ports()} {self.metrics_ports}")

    @classmethod
    def on_free_ports(cls, workers: int = 2, host: str = LOOPBACK, **kwargs) -> StackConfig:
        """A layout on ports the OS reports free, away from ``make run``'s defaults."""
        ids = list(loopback_workers(workers))
        names = [s.name for s in SINGLE_SERVICES] + ids
        ports = iter(pick_free_ports(2 * len(names), host))
        return cls(
            host=host,
            service_ports={s.name: next(ports) for s in SINGLE_SERVICES},
            workers={wid: next(ports) for wid in ids},
            metrics_ports={name: next(ports) for name in names},
            **kwargs,
        )

    @classmethod
    def private(
        cls,
        state_dir: Path | None = None,
        *,
        workers: int = 2,
        extra_env: Mapping[str, str] | None = None,
        **kwargs,
    ) -> StackConfig:
        """A stack that shares nothing with ``make run`` or the caller's shell (tests,
        benchmarks): ports the OS reports free, its own state folder (a new temporary
        one unless given), none of the caller's TURNPIKE_* settings, and no trace export
        unless ``extra_env`` turns it on."""
        if state_dir is None:
            state_dir = Path(tempfile.mkdtemp(prefix="turnpike-stack-"))
        return cls.on_free_ports(
            workers,
            state_dir=state_dir,
            extra_env={"OTEL_SDK_DISABLED": "true", **(extra_env or {})},
            inherit_turnpike_env=False,
            **kwargs,
        )

    def shifted(self, offset: int) -> StackConfig:
        """Every port moved by ``offset`` (to run a second stack beside the first)."""
        return replace(
            self,
            service_ports={name: port + offset for name, port in self.service_ports.items()},
            workers={wid: port + offset for wid, port in self.workers.items()},
            metrics_ports={name: port + offset for name, port in self.metrics_port_map().items()},
        )

    def with_ports(self, **ports: int) -> StackConfig:
        """Some services moved, by name (``with_ports(gateway=8099)``)."""
        return replace(self, service_ports={**self.service_ports, **ports})

    def port(self, name: str) -> int:
        """The port of a service (``"router"``) or of a worker (``"worker-2"``)."""
        return self.ports()[name]

    @property
    def gateway_port(self) -> int:
        return self.service_ports[GATEWAY.name]

    def backend_ports(self) -> dict[str, int]:
        """The gRPC services the gateway calls, in start order."""
        return {b.name: self.service_ports[b.name] for b in BACKENDS}

    @property
    def worker_ids(self) -> list[str]:
        return list(self.workers)

    def worker_addresses(self) -> dict[str, str]:
        return {wid: self.address(port) for wid, port in self.workers.items()}

    def ports(self) -> dict[str, int]:
        """Every process's port by process name."""
        return {**self.service_ports, **self.workers}

    def metrics_port_map(self) -> dict[str, int]:
        """Where each process serves /metrics, by process name."""
        assert self.metrics_ports is not None  # filled in by __post_init__
        return dict(self.metrics_ports)

    def metrics_addresses(self) -> dict[str, str]:
        return {name: self.address(port) for name, port in self.metrics_port_map().items()}

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
        return ledger_path_in(self.state_dir)

    @property
    def vocab_dir(self) -> Path:
        return vocab_dir_in(self.state_dir)


@dataclass(frozen=True)
class ServiceSpec:
    """One process of the stack: ``python -m <module>``, ready when its gRPC health
    reports SERVING (``grpc``) or ``GET /readyz`` answers 200 (``http``)."""

    name: str
    module: str
    port: int
    kind: ServiceProtocol = "grpc"
    env: Mapping[str, str] = field(default_factory=dict)


def program(service: Service) -> str:
    """The module a service runs as: ``python -m turnpike.<name>``."""
    return f"turnpike.{service.name}"


def default_services(config: StackConfig) -> list[ServiceSpec]:
    """The real services in start order: the backends, the workers, then the gateway."""
    metrics = config.metrics_port_map()

    def identity(service: Service, name: str) -> dict[str, str]:
        return {service.metrics_port_variable: str(metrics[name])}

    services = [
        ServiceSpec(
            b.name, program(b), config.service_ports[b.name], b.protocol, identity(b, b.name)
        )
        for b in BACKENDS
    ]
    for wid, port in config.workers.items():
        env = {"TURNPIKE_WORKER_ID": wid, WORKER.port_variable: str(port), **identity(WORKER, wid)}
        services.append(ServiceSpec(wid, program(WORKER), port, WORKER.protocol, env))
    services.append(
        ServiceSpec(
            GATEWAY.name,
            program(GATEWAY),
            config.gateway_port,
            GATEWAY.protocol,
            identity(GATEWAY, GATEWAY.name),
        )
    )
    return services
