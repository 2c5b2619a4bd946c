"""A gateway as a real process, wired to a running stack's backends."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from support.procs import free_port, start_service


def start_gateway(
    stack, ready_path="/readyz", log: Path | None = None, **overrides
) -> tuple[subprocess.Popen, str]:
    """A gateway process on a free port, wired to the stack's backends unless overridden;
    its output goes to the file ``log`` when given."""
    port = free_port()
    env = {
        "TURNPIKE_GATEWAY_PORT": str(port),
        "TURNPIKE_SAFETY_ADDR": stack.safety,
        "TURNPIKE_TOKENIZER_ADDR": stack.tokenizer,
        "TURNPIKE_ROUTER_ADDR": stack.router,
        "TURNPIKE_BILLING_ADDR": stack.billing,
        "TURNPIKE_IMAGERES_ADDR": stack.imageres,
        "TURNPIKE_API_KEYS": "sk-turnpike-dev:dev",
        "TURNPIKE_ALLOW_PIPELINE_OVERRIDE": "true",
        **overrides,
    }
    if log is None:
        proc = start_service("gateway", env)
    else:
        with log.open("ab") as out:  # the child keeps its own copy
            proc = start_service("gateway", env, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}{ready_path}", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, "gateway exited during startup"
        time.sleep(0.1)
    proc.kill()
    pytest.fail("gateway did not become ready")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM (so several processes go down with their supervisor), then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextmanager
def gateway_replicas(stack, count: int, **overrides) -> Iterator[list[str]]:
    """``count`` gateway processes (``start_gateway``): their API base URLs (``.../v1``)."""
    started = [start_gateway(stack, **overrides) for _ in range(count)]
    try:
        yield [base + "/v1" for _, base in started]
    finally:
        for proc, _ in started:
            stop(proc)


def own_gateway(stack, tmp_path_factory, name: str, **env: str) -> Iterator[str]:
    """A gateway process of the test's own, with ``env``: its WebSocket URL (a module
    fixture yields from it)."""
    proc, base = start_gateway(stack, log=tmp_path_factory.mktemp(name) / "gateway.log", **env)
    try:
        yield base.replace("http://", "ws://") + "/v1/responses"
    finally:
        stop(proc)
