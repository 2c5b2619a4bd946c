"""The container numbers of docs/deployment.md ("Measured here"): image sizes, time from
`up` to healthy, and each container's memory under a light load.

    .venv/bin/python deploy/measure.py          # after `make images`; uses its own project

It starts the stack as a Compose project of its own on a free port (beside any `make up`
stack), measures, and removes it. The light load: four clients for LOAD_S seconds, one
request at a time each: HTTP (SSE streaming), HTTP with a function-call loop, WebSocket
follow-ups on one socket, and the legacy pipeline (the image hop and in-line billing).
Memory is sampled from `docker stats` every second; peak and mean are reported.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
from compose import Compose, read_env
from websockets.sync.client import connect as ws_connect

SERVICES = ("gateway", "safety", "tokenizer", "router", "billing", "imageres", "worker")
KEY = "sk-turnpike-dev"
TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def image_sizes(env: dict[str, str]) -> dict[str, float]:
    names = [f"{env['IMAGE_NAME']}/{s}:{env['IMAGE_VERSION']}" for s in SERVICES]
    names += [
        env[key] for key in ("PYTHON_IMAGE", "REDIS_IMAGE", "PROMETHEUS_IMAGE", "HAPROXY_IMAGE")
    ]
    sizes = {}
    for name in names:
        out = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Size}}", name],
            capture_output=True,
            text=True,
        )
        if out.returncode == 0:
            sizes[name] = int(out.stdout) / 1e6
    return sizes


def parse_mib(text: str) -> float:
    value = text.strip().split("/")[0].strip()
    for unit, factor in (("GiB", 1024), ("MiB", 1), ("KiB", 1 / 1024), ("B", 1 / 1024**2)):
        if value.endswith(unit):
            return float(value[: -len(unit)]) * factor
    return 0.0


class Sampler(threading.Thread):
    def __init__(self, compose: Compose) -> None:
        super().__init__(daemon=True)
        self.compose = compose
        self.samples: dict[str, list[float]] = {}
        self.stop_event = threading.Event()

    def run(self) -> None:
        ids = self.compose.container_ids(all_states=False)
        names = {s.name: s.service for s in self.compose.states()}
        while not self.stop_event.is_set():
            out = subprocess.run(
                ["docker", "stats", "--no-stream", "--format", "{{.Name}}\t{{.MemUsage}}", *ids],
                capture_output=True,
                text=True,
            )
            for line in out.stdout.splitlines():
                name, _, usage = line.partition("\t")
                service = names.get(name, name)
                self.samples.setdefault(service, []).append(parse_mib(usage))
            self.stop_event.wait(1.0)


def load(base: str, ws: str, seconds: float) -> dict[str, int]:
    done: dict[str, int] = {}
    deadline = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {KEY}"}

    def count(kind: str) -> None:
        done[kind] = done.get(kind, 0) + 1

    def sse() -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            while time.monotonic() < deadline:
                body = {"model": "turnpike-sim", "input": "Say hello", "stream": True}
                with http.stream("POST", "/responses", json=body) as reply:
                    for _ in reply.iter_lines():
                        pass
                count("sse")

    def tool_loop() -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            while time.monotonic() < deadline:
                first = http.post(
                    "/responses",
                    json={"model": "turnpike-sim", "input": "Weather in Paris?", "tools": [TOOL]},
                ).json()
                call = next(i for i in first["output"] if i["type"] == "function_call")
                http.post(
                    "/responses",
                    json={
                        "model": "turnpike-sim",
                        "previous_response_id": first["id"],
                        "input": [
                            {
                                "type": "function_call_output",
                                "call_id": call["call_id"],
                                "output": "sunny",
                            }
                        ],
                    },
                )
                count("tool_loop")

    def websocket() -> None:
        with ws_connect(ws, additional_headers=headers, open_timeout=10) as sock:
            previous = None
            while time.monotonic() < deadline:
                message = {"type": "response.create", "model": "turnpike-sim", "input": "Go on"}
                if previous:
                    message["previous_response_id"] = previous
                sock.send(json.dumps(message))
                while True:
                    event = json.loads(sock.recv(timeout=60))
                    if event["type"] in ("response.completed", "response.failed", "error"):
                        break
                previous = event.get("response", {}).get("id")
                count("websocket")

    def legacy() -> None:
        with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
            while time.monotonic() < deadline:
                http.post(
                    "/responses",
                    headers={"X-Turnpike-Pipeline": "legacy"},
                    json={"model": "turnpike-sim", "input": "Say hello"},
                )
                count("legacy")

    threads = [threading.Thread(target=f) for f in (sse, tool_loop, websocket, legacy)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load-seconds", type=float, default=60.0)
    args = parser.parse_args()
    port = free_port()
    env = {
        "GATEWAY_PUBLISHED_PORT": str(port),
        "PROMETHEUS_PUBLISHED_PORT": str(free_port()),
        "TURNPIKE_ALLOW_PIPELINE_OVERRIDE": "true",
        # Nothing listens there: export is attempted and dropped, as without Jaeger.
        "OTEL_EXPORTER_OTLP_ENDPOINT": os.environ.get(
            "OTEL_EXPORTER_OTLP_ENDPOINT", read_env()["OTEL_EXPORTER_OTLP_ENDPOINT"]
        ),
    }
    compose = Compose(project=f"turnpike-measure-{os.getpid()}", env=env, quiet=True)
    settings = compose.settings
    print("image sizes (MB):")
    for name, size in image_sizes(settings).items():
        print(f"  {name:40s} {size:6.0f}")
    try:
        healthy_after = compose.up(progress=False)
        print(f"up to healthy: {healthy_after:.1f} s")
        time.sleep(3)
        sampler = Sampler(compose)
        sampler.start()
        base = f"http://127.0.0.1:{port}/v1"
        counts = load(base, base.replace("http://", "ws://") + "/responses", args.load_seconds)
        sampler.stop_event.set()
        sampler.join()
        print(f"light load for {args.load_seconds:g} s: {counts}")
        print("memory under that load (MiB): service, peak, mean")
        for service, values in sorted(sampler.samples.items()):
            print(f"  {service:10s} {max(values):6.1f} {sum(values) / len(values):6.1f}")
    finally:
        compose.down(volumes=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
