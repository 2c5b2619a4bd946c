"""The service images themselves: non-root, a health check, the code and packages of
their own service and nothing else (of the other services, their wire stubs only), no
installer, no build inputs."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name
from testcontainers.core.container import DockerContainer

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "deploy" / "requirements"
SERVICES = ("gateway", "safety", "tokenizer", "router", "billing", "imageres", "worker")

PROBE = r"""
import importlib.metadata as md, importlib.util, json, os, pathlib
app = pathlib.Path("/opt/turnpike/app")
package = app / "turnpike"
stubs_only = {"__init__.py", "__pycache__", "v1"}
def writable(path):
    try:
        probe = pathlib.Path(path) / ".probe"
        probe.write_text("x"); probe.unlink(); return True
    except OSError:
        return False
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(),
    "service": os.environ.get("TURNPIKE_SERVICE"),
    "packages": sorted(p.name for p in app.iterdir() if p.is_dir()),
    "folders_with_code": sorted(
        p.name for p in package.iterdir()
        if p.is_dir() and {c.name for c in p.iterdir()} - stubs_only
    ),
    "dists": {d.metadata["Name"]: d.version for d in md.distributions()},
    "pip": importlib.util.find_spec("pip") is not None,
    "ledger_dir_writable": writable("/var/lib/turnpike/billing"),
    "code_writable": writable(app),
    "wheels": pathlib.Path("/wheels").exists(),
    "vocab": sorted(p.name for p in pathlib.Path("/opt/turnpike/vocab").iterdir()),
}))
"""


def pins(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            found[canonicalize_name(name)] = version
    return found


def probe(image: str) -> dict:
    container = DockerContainer(image).with_command(["python", "-c", PROBE])
    with container:
        wrapped = container.get_wrapped_container()
        status = wrapped.wait(timeout=60)
        output = wrapped.logs().decode()
    assert status["StatusCode"] == 0, output
    return json.loads(output.strip().splitlines()[-1])


def inspect(image: str) -> dict:
    out = subprocess.run(["docker", "image", "inspect", image], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)[0]


@pytest.mark.parametrize("service", SERVICES)
def test_service_image(images, service):
    image = images.service(service)
    facts = probe(image)
    assert facts["uid"] == 10001 and facts["gid"] == 10001
    assert facts["service"] == service
    # One package: the shared library, its own service's code, and of the other services
    # (devstack included) their wire stubs only: services never import each other.
    assert facts["packages"] == ["turnpike"]
    services_with_code = set(facts["folders_with_code"]) & {*SERVICES, "devstack"}
    assert services_with_code == {service}
    # Exactly the pinned packages of its requirement subset: nothing more, nothing less.
    installed = {canonicalize_name(n): v for n, v in facts["dists"].items()}
    assert installed == pins(REQUIREMENTS / "common.txt") | pins(REQUIREMENTS / f"{service}.txt")
    assert not facts["pip"] and not facts["wheels"]
    assert not facts["code_writable"]
    assert facts["ledger_dir_writable"]
    tokenizes = service in ("tokenizer", "worker")
    assert facts["vocab"] == (["o200k_base.tiktoken"] if tokenizes else [])

    config = inspect(image)["Config"]
    assert config["User"] == "10001:10001"
    assert config["Healthcheck"]["Test"] == [
        "CMD",
        "python",
        "/opt/turnpike/healthcheck.py",
    ]
    assert config["Env"] and "TURNPIKE_GRPC_HOST=0.0.0.0" in config["Env"]


def test_a_lone_gateway_is_alive_but_not_healthy(images):
    """Its health check asks /readyz, which needs the backends: no backends, unhealthy."""
    container = DockerContainer(images.service("gateway"))
    with container:
        wrapped = container.get_wrapped_container()
        for _ in range(60):
            result = wrapped.exec_run(["python", "/opt/turnpike/healthcheck.py"])
            if b"/readyz" in result.output and b"Connection refused" not in result.output:
                break
            wrapped.reload()
            assert wrapped.status == "running", wrapped.logs().decode()[-2000:]
            time.sleep(0.5)
        assert result.exit_code == 1, result.output
        assert b"503" in result.output, result.output


def test_a_lone_backend_reports_serving(images):
    container = DockerContainer(images.service("router"))
    with container:
        wrapped = container.get_wrapped_container()
        for _ in range(60):
            result = wrapped.exec_run(["python", "/opt/turnpike/healthcheck.py"])
            if result.exit_code == 0:
                break
            time.sleep(0.5)
        assert result.exit_code == 0, result.output
        assert b"SERVING" in result.output


def test_third_party_stand_ins_say_what_they_are(images):
    for key in ("PYTHON_IMAGE", "REDIS_IMAGE", "PROMETHEUS_IMAGE", "HAPROXY_IMAGE"):
        labels = inspect(images.settings[key])["Config"].get("Labels") or {}
        if "org.turnpike.stand-in" not in labels:
            continue  # the real image, pulled
        description = labels["org.opencontainers.image.description"]
        assert "Debian bookworm packages" in description and images.settings[key] in description
