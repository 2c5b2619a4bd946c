"""Start a service as a real process (``python -m turnpike.<name>``) for end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from support.paths import REPO_ROOT

from turnpike.catalogue import service
from turnpike.devstack import pick_free_ports


def free_port() -> int:
    """A port free on loopback, picked where a client's connection cannot take it first."""
    return pick_free_ports(1)[0]


# Settings a developer's shell may hold that would change a service under test.
SERVICE_SETTINGS = ("TURNPIKE_", "CEREBRAS_")


def service_env(env: dict[str, str]) -> dict[str, str]:
    """Our environment without any service setting, then ``env``."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(SERVICE_SETTINGS)}
    return {**clean, **env}


def start_service(name: str, env: dict[str, str], **popen: Any) -> subprocess.Popen:
    """Run ``python -m turnpike.<name>`` from the repository root with ``env`` as its only
    settings (``popen``: more ``subprocess.Popen`` arguments, e.g. to capture output).
    Its /metrics goes on a free port unless ``env`` says where: the catalogue's default
    may be taken by ``make run`` or by another test's process."""
    metrics_port = service(name).metrics_port_variable
    env = {metrics_port: str(free_port()), **env}
    return subprocess.Popen(
        [sys.executable, "-m", f"turnpike.{name}"], cwd=REPO_ROOT, env=service_env(env), **popen
    )
