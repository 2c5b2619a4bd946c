"""Fixtures of the container tests (marked ``containers``).

``container_stack`` (session scope) is the whole stack of compose.yaml, from the images
`make images` built, as a Compose project of its own (its own network, volume and
published API and Prometheus ports, so it runs beside a `make up` stack), with the
optional Redis tier enabled: two gateway replicas behind HAProxy, sharing Redis. Its services export OTLP to ``otlp``, a receiver in this process that
the containers reach through the Docker host (``host.docker.internal``).

Compose runs through deploy/compose.py (``docker compose`` or ``docker-compose``, whichever
the machine has: testcontainers' own Compose wrapper needs v2); testcontainers drives the
single containers (stop and start one, run an image).

Without a Docker engine every test that needs one is skipped, saying so. With an
engine but without the images, they fail: `make test` builds them first.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from support.gateway_process import gateway_replicas
from support.loopback import publish_on_loopback
from support.otlp_receiver import Receiver
from support.procs import free_port
from support.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("gateway", "safety", "tokenizer", "router", "billing", "imageres", "worker")
DOCKER_FIXTURES = {"docker_engine", "images", "container_stack", "otlp", "redis_url"}

# testcontainers' reaper container would have to be pulled; the fixtures clean up
# themselves.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")


deploy_compose = load_script("turnpike_deploy_compose", REPO / "deploy" / "compose.py")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "containers: needs a Docker engine and the images of `make images`"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.containers)


# -- the engine and the images ------------------------------------------------------------


@pytest.fixture(scope="session")
def docker_engine() -> None:
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        info = None
    if info is None or info.returncode != 0:
        pytest.skip("no Docker engine answers (`docker info` failed): container tests skipped")


@dataclass(frozen=True)
class Images:
    settings: dict[str, str]

    def service(self, name: str) -> str:
        return f"{self.settings['IMAGE_NAME']}/{name}:{self.settings['IMAGE_VERSION']}"


@pytest.fixture(scope="session")
def images(docker_engine: None) -> Images:
    settings = deploy_compose.read_env()
    found = Images(settings)
    wanted = [found.service(s) for s in SERVICES]
    wanted += [settings[key] for key in ("PYTHON_IMAGE", "PROMETHEUS_IMAGE", "HAPROXY_IMAGE")]
    if missing := [name for name in wanted if not deploy_compose.image_exists(name)]:
        pytest.fail(f"images missing: {', '.join(missing)}; run `make images`", pytrace=False)
    return found


@pytest.fixture(scope="session")
def redis_url(images: Images) -> Iterator[str]:
    """A real redis-server (the stack's REDIS_IMAGE) on a free loopback port, for the
    local processes that share it."""
    from testcontainers.core.container import DockerContainer

    image = images.settings["REDIS_IMAGE"]
    if not deploy_compose.image_exists(image):
        pytest.fail(f"image missing: {image}; run `make images`", pytrace=False)
    port = free_port()
    container = DockerContainer(image).with_command(
        ["redis-server", "--protected-mode", "no", "--save", "", "--appendonly", "no"]
    )
    publish_on_loopback(container, "6379/tcp", port)
    with container:
        wrapped = container.get_wrapped_container()
        for _ in range(100):
            if wrapped.exec_run(["redis-cli", "ping"]).output.strip() == b"PONG":
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"redis did not answer: {wrapped.logs().decode()[-1000:]}", pytrace=False)
        yield f"redis://127.0.0.1:{port}/0"


@pytest.fixture
def two_replicas(stack, redis_url: str) -> Iterator[list[str]]:
    """Two gateway processes on ``stack``'s backends sharing ``redis_url``, keys of the
    tenants dev and bob: their API base URLs."""
    keys = "sk-turnpike-dev:dev,sk-test-bob:bob"
    with gateway_replicas(stack, 2, TURNPIKE_REDIS_URL=redis_url, TURNPIKE_API_KEYS=keys) as bases:
        yield bases


# -- the OTLP receiver --------------------------------------------------------------------


def host_gateway_ip(image: str) -> str:
    """The Docker host's address as containers see it (``host-gateway``)."""
    probe = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--add-host",
            "dockerhost:host-gateway",
            image,
            "getent",
            "hosts",
            "dockerhost",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if probe.returncode != 0 or not probe.stdout.split():
        pytest.fail(f"cannot resolve host-gateway in a container: {probe.stderr}", pytrace=False)
    return probe.stdout.split()[0]


@pytest.fixture(scope="session")
def otlp(images: Images) -> Iterator[Receiver]:
    """Listens on the host's bridge address only: reachable from the containers, not
    from outside this machine."""
    receiver = Receiver()
    address = host_gateway_ip(images.service("router"))
    try:
        receiver.start(address)
    except RuntimeError as err:  # grpc cannot bind: the engine is not on this host
        pytest.skip(f"cannot listen on the Docker host address {address}: {err}")
    try:
        yield receiver
    finally:
        receiver.stop()


# -- the stack -------------------------------------------------------------------------------

TENANT_KEYS = {
    "dev": "sk-turnpike-dev",
    "billing": "sk-test-billing",
    "faults": "sk-test-faults",
    "sdk": "sk-test-sdk",
    "metrics": "sk-test-metrics",
    # The chaos test's agent loops, a tenant each (HAProxy spreads keys over the replicas).
    **{f"chaos-{n}": f"sk-test-chaos-{n}" for n in range(1, 5)},
    # The rolling restart's (tests/containers/test_rolling_restart.py).
    **{f"roll-{n}": f"sk-test-roll-{n}" for n in range(1, 9)},
}


# The gateway replicas of compose.yaml, behind HAProxy, which names the one that answered.
GATEWAYS = ("gateway-1", "gateway-2")
REPLICA_HEADER = "x-turnpike-replica"


@dataclass
class ContainerStack:
    compose: Any  # deploy/compose.py's Compose (loaded by its path: no static type)
    gateway: str  # http://127.0.0.1:<port>: HAProxy, in front of the replicas
    keys: dict[str, str]  # tenant -> API key
    ready_after_s: float
    prometheus: str = ""  # http://127.0.0.1:<port>, its UI and HTTP API

    @property
    def base_url(self) -> str:
        return f"{self.gateway}/v1"

    @property
    def ws_url(self) -> str:
        return self.base_url.replace("http://", "ws://") + "/responses"

    def container(self, service: str):
        """The service's container (docker SDK object, through testcontainers)."""
        from testcontainers.core.docker_client import DockerClient

        return DockerClient().client.containers.get(self.compose.container_id(service))

    def wait_healthy(self, *services: str, timeout_s: float = 90.0) -> float:
        return self.compose.wait_healthy(timeout_s, services=services or None)

    def gateway_alive(self) -> bool:
        try:
            return httpx.get(f"{self.gateway}/healthz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False


@pytest.fixture(scope="session")
def container_stack(images: Images, otlp: Receiver) -> Iterator[ContainerStack]:
    port, prometheus_port = free_port(), free_port()
    env = {
        "GATEWAY_PUBLISHED_PORT": str(port),
        "PROMETHEUS_PUBLISHED_PORT": str(prometheus_port),
        "PUBLISH_ADDRESS": "127.0.0.1",
        "TURNPIKE_API_KEYS": ",".join(f"{key}:{tenant}" for tenant, key in TENANT_KEYS.items()),
        "TURNPIKE_ALLOW_PIPELINE_OVERRIDE": "true",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://host.docker.internal:{otlp.port}",
        # Export within a fifth of a second, so the tests wait little.
        "OTEL_BSP_SCHEDULE_DELAY": "200",
        # One sealing key for both gateway replicas, as .env asks of a real deployment.
        "TURNPIKE_SERVER_KEY": base64.b64encode(os.urandom(32)).decode(),
        # Under the chaos clients' 20 s timeout: a service or a worker cut off the network
        # fails the turn with the server's own error before the client gives up waiting.
        "TURNPIKE_BACKEND_TIMEOUT_S": "10",
        "TURNPIKE_WORKER_SILENCE_TIMEOUT_S": "10",
    }
    # A project of its own per run; COMPOSE_PROJECT_NAME (as for `make images`) names it,
    # so runs from several checkouts are told apart.
    prefix = os.environ.get("COMPOSE_PROJECT_NAME") or "turnpike"
    compose = deploy_compose.Compose(
        project=f"{prefix}-test-{os.getpid()}", env=env, profiles=["redis"], quiet=True
    )
    begin = time.monotonic()
    try:
        ready_after = compose.up(timeout_s=180, progress=False)
    except deploy_compose.ComposeError as err:
        compose.down(volumes=True)
        pytest.fail(f"the container stack did not come up: {err}", pytrace=False)
    stack = ContainerStack(
        compose,
        f"http://127.0.0.1:{port}",
        dict(TENANT_KEYS),
        ready_after,
        prometheus=f"http://127.0.0.1:{prometheus_port}",
    )
    try:
        yield stack
    finally:
        compose.down(volumes=True)
        print(
            f"container stack: up in {ready_after:.1f} s, session {time.monotonic() - begin:.0f} s"
        )


@pytest.fixture
def redis_container(redis_url: str):
    """The container behind ``redis_url`` (found by its published port), for tests that
    stop it; started again afterwards if a test left it stopped."""
    from testcontainers.core.docker_client import DockerClient

    port = str(urlsplit(redis_url).port)
    for container in DockerClient().client.containers.list():
        for bindings in (container.ports or {}).values():
            if any(binding["HostPort"] == port for binding in bindings or ()):
                yield container
                container.reload()
                if container.status != "running":
                    container.start()
                return
    pytest.fail(f"no container publishes {redis_url}", pytrace=False)
