"""The gateway the fuzzers attack: a process of its own, wired to the session stack's
real backends, with two tenants (for cross-tenant ids) and its log captured to a file
(the fuzzers' property includes "no server error in the log")."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from support.gateway_process import start_gateway, stop

KEYS = {"alice": "sk-fuzz-alice", "bob": "sk-fuzz-bob"}
MAX_BYTES = 1 << 20  # body and frame limits: huge inputs cost 1 MiB, not the default

# Lines of a server error: a logged ERROR or a traceback (uvicorn's and ours).
SERVER_ERROR = re.compile(r"\bERROR\b|Traceback")


@dataclass
class FuzzGateway:
    proc: subprocess.Popen
    base: str  # http://127.0.0.1:port
    log_path: Path

    @property
    def ws_url(self) -> str:
        return self.base.replace("http://", "ws://") + "/v1/responses"

    def headers(self, tenant: str = "alice") -> dict[str, str]:
        return {"Authorization": f"Bearer {KEYS[tenant]}"}

    def log_size(self) -> int:
        return self.log_path.stat().st_size

    def server_errors(self, since: int = 0) -> list[str]:
        """The log's server-error lines written after byte ``since``."""
        with self.log_path.open("rb") as log:
            log.seek(since)
            text = log.read().decode(errors="replace")
        return [line for line in text.splitlines() if SERVER_ERROR.search(line)]

    def alive(self) -> bool:
        return self.proc.poll() is None


def start_fuzz_gateway(stack, log_path: Path, **overrides: str) -> FuzzGateway:
    log_path.write_bytes(b"")
    proc, base = start_gateway(
        stack,
        log=log_path,
        TURNPIKE_API_KEYS=",".join(f"{key}:{tenant}" for tenant, key in KEYS.items()),
        TURNPIKE_MAX_BODY_BYTES=str(MAX_BYTES),
        TURNPIKE_MAX_FRAME_BYTES=str(MAX_BYTES),
        **overrides,
    )
    return FuzzGateway(proc, base, log_path)


def stop_fuzz_gateway(gateway: FuzzGateway) -> None:
    stop(gateway.proc)
