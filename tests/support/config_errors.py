"""A service's process started with bad settings, and the one line it must end with:
"<service>: configuration error: <message>", exit code 2, no traceback."""

from __future__ import annotations

import subprocess

from support.procs import start_service


def run_with(module: str, env: dict[str, str], timeout: float = 60.0) -> tuple[int, str]:
    proc = start_service(module, env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


def assert_configuration_error(service: str, code: int, err: str, *named: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err, err
    [line] = [ln for ln in err.splitlines() if "configuration error" in ln]
    assert line.startswith(f"{service}: configuration error: "), err
    for text in named:
        assert text in line, line
