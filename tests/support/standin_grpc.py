"""Stand-in backend for the devstack tests: a gRPC server with only the health service.

Environment: STANDIN_PORT (required); STANDIN_NOT_SERVING_CHECKS=N answers the first N
health checks NOT_SERVING (so a launcher that does not wait for SERVING is caught);
STANDIN_CRASH=1 exits with code 3 before serving; STANDIN_IGNORE_SIGTERM=1 survives
SIGTERM (so stop() must escalate); STANDIN_CHILD=1 starts a child process that never
exits on its own and prints its pid (so stop() must clear the whole process group).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


class SlowToServeHealth(health.aio.HealthServicer):
    def __init__(self, not_serving_checks: int) -> None:
        super().__init__()
        self._not_serving_left = not_serving_checks
        self._server_status[""] = NOT_SERVING if not_serving_checks else SERVING

    async def Check(self, request, context):
        if self._not_serving_left > 0:
            self._not_serving_left -= 1
            reply = await super().Check(request, context)
            if self._not_serving_left == 0:
                await self.set("", SERVING)
            return reply
        return await super().Check(request, context)


async def serve() -> None:
    if os.environ.get("STANDIN_CRASH") == "1":
        print("standin: crashing on purpose before serving", file=sys.stderr, flush=True)
        sys.exit(3)
    server = grpc.aio.server()
    servicer = SlowToServeHealth(int(os.environ.get("STANDIN_NOT_SERVING_CHECKS", "0")))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    host = os.environ.get("TURNPIKE_GRPC_HOST", "127.0.0.1")
    server.add_insecure_port(f"{host}:{os.environ['STANDIN_PORT']}")
    await server.start()
    print(f"standin: pid {os.getpid()} serving on {host}:{os.environ['STANDIN_PORT']}", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if os.environ.get("STANDIN_IGNORE_SIGTERM") == "1":
        loop.add_signal_handler(signal.SIGTERM, lambda: print("standin: ignoring SIGTERM"))
    else:
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0)
    print("standin: stopped", flush=True)


if __name__ == "__main__":
    if os.environ.get("STANDIN_CHILD") == "1":
        child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])
        print(f"standin: child pid {child.pid}", flush=True)
    asyncio.run(serve())
