"""Every running container of the stack, as the engine reports it (``docker inspect``):
not root, a read-only root file system, every capability dropped, no new privileges, and
no process in it running as root. compose.yaml declares the same (test_deploy_compose);
this checks that the engine applied it, to the third-party containers too."""

from __future__ import annotations

import json
import subprocess

import pytest
from support.compose_services import STACK_SERVICES

ROOT = ("", "root", "0")


@pytest.fixture(scope="module")
def inspected(container_stack) -> dict[str, dict]:
    ids = container_stack.compose.container_ids(all_states=False)
    out = subprocess.run(
        ["docker", "inspect", *ids], capture_output=True, text=True, check=True, timeout=60
    )
    return {
        info["Config"]["Labels"]["com.docker.compose.service"]: info
        for info in json.loads(out.stdout)
    }


def test_every_service_runs(inspected):
    assert STACK_SERVICES <= set(inspected)


def test_no_container_runs_as_root(inspected):
    for service, info in inspected.items():
        user = info["Config"]["User"]
        assert user.split(":")[0] not in ROOT, f"{service} runs as {user!r}"


def test_every_root_file_system_is_read_only_and_every_capability_dropped(inspected):
    for service, info in inspected.items():
        host = info["HostConfig"]
        assert host["ReadonlyRootfs"] is True, service
        assert "ALL" in (host["CapDrop"] or []), service
        assert not host["CapAdd"] and host["Privileged"] is False, service
        assert "no-new-privileges:true" in (host["SecurityOpt"] or []), service


def test_no_process_is_root_and_nothing_outside_a_tmpfs_is_writable(inspected):
    for service, info in inspected.items():
        top = subprocess.run(
            ["docker", "top", info["Id"], "-o", "pid,uid,comm"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.splitlines()[1:]
        owners = {line.split()[1] for line in top}
        assert owners and not owners & {"0", "root"}, f"{service}: {top}"
        # Where each image puts its working files, and the root: refused, unless a volume
        # or a tmpfs is mounted there (Redis's append-only file is in its working folder).
        tmpfs = info["HostConfig"].get("Tmpfs") or {}
        mounted = {m["Destination"] for m in info["Mounts"]} | set(tmpfs)
        for path in {"/", info["Config"]["WorkingDir"] or "/"} - mounted:
            probe = subprocess.run(
                ["docker", "exec", info["Id"], "touch", f"{path.rstrip('/')}/.probe"],
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert probe.returncode != 0, f"{service}: {path} is writable"
