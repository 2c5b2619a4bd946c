"""llama.cpp's server with a real model, beside a local stack (``make run LLAMACPP=1``, the
real-model benchmark and its tests): the image ``make image-llamacpp`` builds, run as a
container on a loopback port, with the workers' OpenAI-compatible backend pointed at it.

The server's own settings (threads, context, slots, template) are the image's, as
``LLAMA_ARG_*`` variables (deploy/llamacpp/Dockerfile); ``env`` overrides one for a run.
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

from turnpike.catalogue import LOOPBACK

DEFAULT_IMAGE = "turnpike/llama-server-gemma3-270m:local"
SERVED_AS = "gemma-3-270m"  # the image's --alias: the model name the server answers to
CONTAINER_PORT = 8089
# Measured: 230 MiB resident after a 16k-token conversation; the limit leaves room for the
# prompt cache the image bounds (LLAMA_ARG_CACHE_RAM).
MEMORY_LIMIT = "640m"
READY_TIMEOUT_S = 60.0
# How long the gateway lets a worker say nothing: this server's longest prefill.
PREFILL_SILENCE_S = "180"


class LlamaServerError(RuntimeError):
    """The server could not be started: no image, or it never became healthy."""


def image_from_env() -> str:
    return os.environ.get("LLAMACPP_MODEL_IMAGE") or DEFAULT_IMAGE


@dataclass
class LlamaServer:
    """One llama-server container; ``start()`` returns once /health answers 200."""

    port: int
    image: str = field(default_factory=image_from_env)
    env: Mapping[str, str] = field(default_factory=dict)
    memory: str = MEMORY_LIMIT
    name: str = field(default_factory=lambda: f"turnpike-llamacpp-{uuid.uuid4().hex[:8]}")

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def worker_env(self) -> dict[str, str]:
        """What the stack's processes need to send their requests here (every process
        gets them; each reads its own)."""
        return {
            "TURNPIKE_OPENAI_COMPAT_BASE_URL": f"{self.base_url}/v1",
            "TURNPIKE_OPENAI_COMPAT_MODEL": SERVED_AS,
            # Its template makes no tool calls: a required one is asked as JSON.
            "TURNPIKE_OPENAI_COMPAT_CALLS_AS_JSON": "true",
            # Prefill on CPU: 16k tokens at a few hundred a second, slower on a busy host.
            "TURNPIKE_WORKER_SILENCE_TIMEOUT_S": PREFILL_SILENCE_S,
        }

    def start(self, timeout_s: float = READY_TIMEOUT_S) -> None:
        found = subprocess.run(["docker", "image", "inspect", self.image], capture_output=True)
        if found.returncode:
            raise LlamaServerError(f"{self.image} is not built: run `make image-llamacpp`")
        # No --rm: a server that dies while starting keeps its log for the error.
        command = ["docker", "run", "-d", "--name", self.name, "--read-only"]
        command += ["--tmpfs", "/tmp", "--cap-drop", "ALL", "--memory", self.memory]
        command += ["-p", f"{LOOPBACK}:{self.port}:{CONTAINER_PORT}"]
        for name, value in self.env.items():
            command += ["-e", f"{name}={value}"]
        started = subprocess.run([*command, self.image], capture_output=True, text=True)
        if started.returncode:
            raise LlamaServerError(f"docker run failed: {started.stderr.strip()[-500:]}")
        self._wait_healthy(timeout_s)

    def _wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.base_url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass  # still loading the model
            if not self.running():
                raise LlamaServerError(f"llama-server exited while starting:\n{self.logs()}")
            time.sleep(0.2)
        logs = self.logs()
        self.stop()
        raise LlamaServerError(f"llama-server not ready within {timeout_s:g} s:\n{logs}")

    def running(self) -> bool:
        state = subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Running}}", self.name],
            capture_output=True,
            text=True,
        )
        return state.stdout.strip() == "true"

    def logs(self, lines: int = 40) -> str:
        out = subprocess.run(
            ["docker", "logs", "--tail", str(lines), self.name], capture_output=True, text=True
        )
        return (out.stdout + out.stderr).strip()

    def stop(self) -> None:
        subprocess.run(["docker", "stop", "-t", "5", self.name], capture_output=True)
        subprocess.run(["docker", "rm", "-f", self.name], capture_output=True)
