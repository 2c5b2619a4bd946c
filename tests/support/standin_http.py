"""Stand-in gateway for the devstack tests: a tiny HTTP server.

``GET /readyz`` answers 503 to the first STANDIN_NOT_READY_CHECKS calls, then 200.
``GET /state`` returns JSON: the TURNPIKE_* / OTEL_* environment it was given and, for
each address in STANDIN_BACKENDS (comma separated host:port), whether it accepted a
TCP connection when this process started (the launcher must start the gateway last).
SIGTERM stops it with exit code 0.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def reachable(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


BACKENDS_AT_START = {
    address: reachable(address)
    for address in os.environ.get("STANDIN_BACKENDS", "").split(",")
    if address
}
not_ready_left = int(os.environ.get("STANDIN_NOT_READY_CHECKS", "0"))
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        global not_ready_left
        if self.path == "/readyz":
            with lock:
                ready = not_ready_left == 0
                not_ready_left = max(0, not_ready_left - 1)
            self.reply(200 if ready else 503, {"ready": ready})
        elif self.path == "/state":
            env = {k: v for k, v in os.environ.items() if k.startswith(("TURNPIKE_", "OTEL_"))}
            self.reply(200, {"env": env, "backends_at_start": BACKENDS_AT_START})
        else:
            self.reply(404, {"error": "not found"})

    def reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    host = os.environ["TURNPIKE_GATEWAY_HOST"]
    server = ThreadingHTTPServer((host, int(os.environ["TURNPIKE_GATEWAY_PORT"])), Handler)
    # shutdown() blocks until serve_forever returns, so call it from another thread.
    signal.signal(
        signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start()
    )
    print(f"standin gateway: serving on {host}:{server.server_port}", flush=True)
    server.serve_forever()
    server.server_close()
    print("standin gateway: stopped", flush=True)


if __name__ == "__main__":
    main()
