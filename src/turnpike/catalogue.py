"""Every Turnpike service, its default port and the variables that move it: the one
place ports are written.

``turnpike.config``, every service's entry point and devstack read this table. The
files that cannot import it, ``.env`` (Compose) and the Kubernetes base
(``deploy/k8s/base``), get their port values from it through ``make ports``; a test
fails when they are stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

LOOPBACK = "127.0.0.1"
# How a service is reached, and so how it is probed: gRPC health, or GET /readyz.
ServiceProtocol = Literal["grpc", "http"]


@dataclass(frozen=True)
class Service:
    name: str  # the package (python -m <name>) and its host name in Compose and Kubernetes
    port: int  # where it listens unless told otherwise (the loopback layout of make run)
    port_variable: str  # what tells it otherwise
    # What tells the gateway where it is ("host:port"); None when the gateway does not
    # call it directly (the workers are the router's: TURNPIKE_WORKERS).
    address_variable: str | None
    protocol: ServiceProtocol = "grpc"
    # Where it serves /metrics (Prometheus text format), on a port of its own so that
    # scraping never shares the API's listener; moved by ``metrics_port_variable``.
    metrics_port: int = 0

    @property
    def metrics_port_variable(self) -> str:
        return f"TURNPIKE_{self.name.upper()}_METRICS_PORT"

    @property
    def loopback_address(self) -> str:
        return f"{LOOPBACK}:{self.port}"


GATEWAY = Service("gateway", 8080, "TURNPIKE_GATEWAY_PORT", None, "http", 9180)
SAFETY = Service("safety", 50051, "TURNPIKE_SAFETY_PORT", "TURNPIKE_SAFETY_ADDR", metrics_port=9151)
TOKENIZER = Service(
    "tokenizer", 50052, "TURNPIKE_TOKENIZER_PORT", "TURNPIKE_TOKENIZER_ADDR", metrics_port=9152
)
ROUTER = Service("router", 50053, "TURNPIKE_ROUTER_PORT", "TURNPIKE_ROUTER_ADDR", metrics_port=9153)
BILLING = Service(
    "billing", 50054, "TURNPIKE_BILLING_PORT", "TURNPIKE_BILLING_ADDR", metrics_port=9154
)
IMAGERES = Service(
    "imageres", 50055, "TURNPIKE_IMAGERES_PORT", "TURNPIKE_IMAGERES_ADDR", metrics_port=9155
)
# Replicas on one machine take the ports after these (worker-1, worker-2, ...).
WORKER = Service("worker", 50061, "TURNPIKE_WORKER_PORT", None, metrics_port=9161)

SERVICES = (GATEWAY, SAFETY, TOKENIZER, ROUTER, BILLING, IMAGERES, WORKER)
# The gRPC services the gateway calls directly, in the order make run starts them.
BACKENDS = tuple(s for s in SERVICES if s.address_variable is not None)


def service(name: str) -> Service:
    for known in SERVICES:
        if known.name == name:
            return known
    raise KeyError(f"no service {name!r} in the catalogue")


def loopback_workers(count: int, first_port: int = WORKER.port) -> dict[str, int]:
    """Worker replicas on one host, id -> port: worker-1 on ``first_port``, worker-2 on
    the next, and so on."""
    return {f"worker-{i}": first_port + i - 1 for i in range(1, count + 1)}
