"""The container health check of every Turnpike image (Docker's HEALTHCHECK contract:
exit 0 when healthy, 1 when not).

A backend is asked over the standard gRPC health service (``grpc.health.v1``, the
server-wide status ""); the gateway over ``GET /readyz``, which answers 200 once every
backend it needs is serving. The port is the one the service itself reads from its
environment (the service catalogue of the shared library, on the image's PYTHONPATH).
Neither probe is traced: this process has no tracer, and the services leave health
checks out of their traces.
"""

from __future__ import annotations

import os
import sys

from turnpike.catalogue import SERVICES

TIMEOUT_S = 3.0
WILDCARDS = ("", "0.0.0.0", "::", "[::]")


def local_host(variable: str) -> str:
    """Where to reach the service from inside its own container."""
    host = os.environ.get(variable, "")
    return "127.0.0.1" if host in WILDCARDS else host


def check_grpc(port: int) -> tuple[bool, str]:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    target = f"{local_host('TURNPIKE_GRPC_HOST')}:{port}"
    # A proxy from the environment must never sit between a service and its own probe.
    with grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)]) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT_S
            )
        except grpc.RpcError as err:
            return False, f"{target}: {err.code().name} {err.details()}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return reply.status == health_pb2.HealthCheckResponse.SERVING, f"{target}: {status}"


def check_http(port: int) -> tuple[bool, str]:
    import urllib.error
    import urllib.request

    url = f"http://{local_host('TURNPIKE_GATEWAY_HOST')}:{port}/readyz"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=TIMEOUT_S) as reply:
            return reply.status == 200, f"{url}: {reply.status} {reply.read(300).decode()}"
    except urllib.error.HTTPError as err:
        return False, f"{url}: {err.code} {err.read(300).decode(errors='replace')}"
    except OSError as err:
        return False, f"{url}: {err}"


def main() -> int:
    name = os.environ.get("TURNPIKE_SERVICE", "")
    known = {service.name: service for service in SERVICES}
    if name not in known:
        print(f"unknown TURNPIKE_SERVICE {name!r}; expected one of {sorted(known)}")
        return 1
    service = known[name]
    port = int(os.environ.get(service.port_variable) or service.port)
    healthy, detail = (check_http if service.protocol == "http" else check_grpc)(port)
    print(detail)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
