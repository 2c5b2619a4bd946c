"""A worker stand-in for the router's tests: a gRPC server with only the health service,
reporting the inference service SERVING."""

from __future__ import annotations

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from turnpike.router.health import INFERENCE_SERVICE


async def fake_worker(port: int) -> grpc.aio.Server:
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await servicer.set(INFERENCE_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    return server
