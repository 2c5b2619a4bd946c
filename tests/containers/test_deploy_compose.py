"""compose.yaml and .env, read as files (no Docker engine needed): the conventions the
stack promises, checked so an edit cannot quietly break them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support.compose_services import BACKENDS, GATEWAYS, TURNPIKE_SERVICES

from turnpike.catalogue import SERVICES

REPO = Path(__file__).resolve().parents[2]
LEDGER_DIR = "/var/lib/turnpike/billing"
HAPROXY = REPO / "deploy" / "haproxy"
MONITOR_PORT = 8404


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def dotenv() -> dict[str, str]:
    values = {}
    for line in (REPO / ".env").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f".env line without '=': {line!r}"
            values[key] = value
    return values


def test_env_is_the_single_configuration_surface(dotenv):
    text = (REPO / "compose.yaml").read_text()
    used = set(re.findall(r"\$\{([A-Z0-9_]+)", text))
    assert used, "compose.yaml takes its settings from .env"
    assert not used - set(dotenv), f"not in .env: {sorted(used - set(dotenv))}"
    for key, value in dotenv.items():
        # docker-compose 1.x expands nothing inside .env, and keeps inline comments.
        assert "${" not in value and " #" not in value, key
    for image in (
        "PYTHON_IMAGE",
        "REDIS_IMAGE",
        "PROMETHEUS_IMAGE",
        "HAPROXY_IMAGE",
        "JAEGER_IMAGE",
    ):
        assert dotenv[image]


def test_every_service_has_a_health_check_and_a_memory_limit(compose):
    services = compose["services"]
    assert TURNPIKE_SERVICES | {"haproxy", "redis", "jaeger", "prometheus", "llamacpp"} == set(
        services
    )
    for name, service in services.items():
        test = service.get("healthcheck", {}).get("test")
        assert test and test[0] in ("CMD", "CMD-SHELL"), name
        limit = str(service.get("mem_limit", ""))
        assert re.fullmatch(r"\d+m", limit), f"{name}: mem_limit {limit!r}"
        assert 32 <= int(limit[:-1]) <= 1024, name


def test_turnpike_containers_run_read_only(compose):
    for name in TURNPIKE_SERVICES:
        service = compose["services"][name]
        assert service["read_only"] is True and service["tmpfs"] == ["/tmp"], name


def test_every_container_is_hardened(compose):
    """Read-only root file system, every capability dropped, no privilege gained through
    setuid, never root: for Turnpike's containers and the third-party ones alike (their
    users: the images' own, checked running by test_container_security)."""
    for name, service in compose["services"].items():
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"], name
        assert not service.get("cap_add") and not service.get("privileged"), name
        assert str(service.get("user", "")).split(":")[0] not in ("root", "0"), name
        assert service.get("network_mode") != "host" and service.get("pid") != "host", name
    assert compose["services"]["redis"]["user"] == "redis"  # the official image's too


def test_only_the_load_balancer_prometheus_and_the_jaeger_ui_are_published(compose):
    """The API's one way in is HAProxy: the gateway replicas are not published."""
    published = {name: s["ports"] for name, s in compose["services"].items() if s.get("ports")}
    assert set(published) == {"haproxy", "prometheus", "jaeger"}
    assert published["haproxy"] == ["${PUBLISH_ADDRESS}:${GATEWAY_PUBLISHED_PORT}:${GATEWAY_PORT}"]
    assert published["prometheus"] == ["${PUBLISH_ADDRESS}:${PROMETHEUS_PUBLISHED_PORT}:9090"]
    assert published["jaeger"] == ["${PUBLISH_ADDRESS}:${JAEGER_UI_PUBLISHED_PORT}:16686"]


def test_one_named_network_for_everything(compose):
    assert list(compose["networks"]) == ["turnpike"]
    for name, service in compose["services"].items():
        assert service["networks"] == ["turnpike"], name


def test_depends_on_only_for_hard_prerequisites(compose):
    services = compose["services"]
    for name in GATEWAYS:
        gateway = services[name]["depends_on"]
        assert set(gateway) == BACKENDS  # not Redis (optional), not Jaeger, not the workers
        assert all(dep["condition"] == "service_healthy" for dep in gateway.values())
    # Not even HAProxy on the replicas: it finds them by name (Docker's DNS) when they come.
    others = [n for n, s in services.items() if n not in GATEWAYS and s.get("depends_on")]
    assert not others


def test_optional_tiers_are_profiles(compose):
    profiled = {n: s["profiles"] for n, s in compose["services"].items() if s.get("profiles")}
    assert profiled == {"redis": ["redis"], "jaeger": ["jaeger"], "llamacpp": ["llamacpp"]}


def test_two_workers_and_the_router_knows_both(compose):
    services = compose["services"]
    workers = sorted(n for n in services if n.startswith("worker-"))
    assert len(workers) >= 2
    routed = services["router"]["environment"]["TURNPIKE_WORKERS"]
    assert routed == ",".join(f"{w}={w}:${{WORKER_PORT}}" for w in workers)
    for worker in workers:
        env = services[worker]["environment"]
        assert env["TURNPIKE_WORKER_ID"] == worker
        assert f"service.instance.id={worker}" in env["OTEL_RESOURCE_ATTRIBUTES"]


def test_the_billing_ledger_is_on_a_named_volume(compose):
    billing = compose["services"]["billing"]
    assert billing["volumes"] == [f"billing-ledger:{LEDGER_DIR}"]
    assert billing["environment"]["TURNPIKE_BILLING_LEDGER"].startswith(LEDGER_DIR + "/")
    assert "billing-ledger" in compose["volumes"]


def test_services_get_standard_otel_settings_and_known_turnpike_variables(compose):
    code = "\n".join(p.read_text() for p in (REPO / "src").rglob("*.py"))
    # The catalogue names these (Service.metrics_port_variable) rather than spelling them.
    metrics_variables = {s.metrics_port_variable for s in SERVICES}
    for name in TURNPIKE_SERVICES:
        env = compose["services"][name]["environment"]
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "${OTEL_EXPORTER_OTLP_ENDPOINT}"
        assert env["OTEL_SERVICE_NAME"] == name.split("-")[0]
        for key in env:
            # CEREBRAS_*: the Cerebras SDK's own names (turnpike.config reads them).
            assert key.startswith(("OTEL_", "TURNPIKE_", "CEREBRAS_")), f"{name}: {key}"
            if key.startswith(("TURNPIKE_", "CEREBRAS_")) and key not in metrics_variables:
                assert f'"{key}"' in code, f"{name}: {key} is read by no service"


def test_prometheus_scrapes_every_turnpike_service_on_the_metrics_port(compose, dotenv):
    """Each container serves /metrics on METRICS_PORT; prometheus.yml (which cannot read
    .env) names every Turnpike service at that port, and nothing else but itself."""
    for name in TURNPIKE_SERVICES:
        variable = f"TURNPIKE_{name.split('-')[0].upper()}_METRICS_PORT"
        assert compose["services"][name]["environment"][variable] == "${METRICS_PORT}", name
    config = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    targets = {
        target: job["job_name"]
        for job in config["scrape_configs"]
        for static in job["static_configs"]
        for target in static["targets"]
    }
    turnpike = {t: job for t, job in targets.items() if job not in ("prometheus", "haproxy")}
    assert turnpike == {f"{n}:{dotenv['METRICS_PORT']}": n.split("-")[0] for n in TURNPIKE_SERVICES}
    # HAProxy's built-in exporter, on its monitor port.
    assert {t for t, job in targets.items() if job == "haproxy"} == {f"haproxy:{MONITOR_PORT}"}
    assert config["rule_files"] == ["rules.yml"]
    prometheus = compose["services"]["prometheus"]
    assert prometheus["volumes"] == ["./deploy/prometheus:/etc/prometheus:ro"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prometheus["command"]


def haproxy_sections() -> dict[str, list[str]]:
    """haproxy.cfg as {section header: its lines}, comments dropped."""
    sections: dict[str, list[str]] = {}
    current = ""
    for raw in (HAPROXY / "haproxy.cfg").read_text().splitlines():
        line = raw.split("#")[0].rstrip()
        if not line.strip():
            continue
        if not raw.startswith((" ", "\t")):
            current = line.strip()
            sections[current] = []
        else:
            sections[current].append(" ".join(line.split()))
    return sections


def test_haproxy_balances_every_gateway_replica(compose):
    """Every gateway service is a server of both backends (ready: /readyz; alive: /healthz,
    when none is ready), by the name and port compose gives it; WebSocket tunnels are kept
    long; a tenant's key sticks to one replica."""
    haproxy = compose["services"]["haproxy"]
    assert haproxy["environment"] == {"GATEWAY_PORT": "${GATEWAY_PORT}"}
    assert haproxy["volumes"] == ["./deploy/haproxy:/usr/local/etc/haproxy:ro"]
    assert haproxy["read_only"] is True
    sections = haproxy_sections()
    assert 'bind :"${GATEWAY_PORT}"' in sections["frontend api"]
    assert f"bind :{MONITOR_PORT}" in sections["frontend monitor"]
    assert (
        "http-request use-service prometheus-exporter if { path /metrics }"
        in sections["frontend monitor"]
    )
    assert str(MONITOR_PORT) in " ".join(haproxy["healthcheck"]["test"])
    for backend, path in (("ready", "/readyz"), ("alive", "/healthz")):
        lines = sections[f"backend {backend}"]
        servers = {line.split()[1]: line.split()[2] for line in lines if line.startswith("server ")}
        assert servers == {name: f'{name}:"${{GATEWAY_PORT}}"' for name in sorted(GATEWAYS)}
        assert f"http-check send meth GET uri {path}" in lines
        assert "balance hdr(Authorization)" in lines and "hash-type consistent" in lines
    defaults = sections["defaults"]
    assert "timeout tunnel 1h" in defaults and "timeout http-request 10s" in defaults


def test_haproxy_errors_are_in_the_api_shape():
    """What the proxy answers itself (no replica, a replica gone mid-answer, a timeout) is
    the API's error body, so an SDK client reads a clear message."""
    configured = [
        line.split()[2] for line in haproxy_sections()["defaults"] if line.startswith("errorfile")
    ]
    assert len(configured) >= 4
    for path in configured:
        raw = (HAPROXY / path.removeprefix("/usr/local/etc/haproxy/")).read_bytes()
        head, _, body = raw.partition(b"\r\n\r\n")
        status = int(head.split()[1])
        assert path.endswith(f"/{status}.http")
        assert b"Content-Type: application/json" in head
        error = json.loads(body)["error"]
        assert set(error) == {"message", "type", "code", "param"} and error["message"]


def test_haproxy_errors_are_http_a_websocket_client_reads():
    """HAProxy sends an errorfile as it is written, status line included. A WebSocket
    client (``websockets``, under the OpenAI SDK) accepts only an HTTP/1.1 answer to its
    upgrade: one in HTTP/1.0 was "did not receive a valid HTTP response" (InvalidMessage),
    as if the connection had closed unanswered, the chaos test's handshakes that failed
    while no replica was ready. So each is HTTP/1.1, framed by its Content-Length, and the
    client reads it as a refused upgrade with the status and the API's error body."""
    from websockets.client import ClientProtocol
    from websockets.exceptions import InvalidStatus
    from websockets.uri import parse_uri

    for path in sorted((HAPROXY / "errors").glob("*.http")):
        raw = path.read_bytes()
        client = ClientProtocol(parse_uri("ws://127.0.0.1/v1/responses"))
        client.send_request(client.connect())
        client.receive_data(raw)
        client.receive_eof()
        refused = client.handshake_exc
        assert isinstance(refused, InvalidStatus), (
            path.name,
            refused,
            refused and refused.__cause__,
        )
        assert refused.response.status_code == int(path.stem)
        assert json.loads(refused.response.body)["error"]["message"]
        head, _, body = raw.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 "), path.name
        assert f"Content-Length: {len(body)}".encode() in head.split(b"\r\n"), path.name


def test_compose_accepts_the_file():
    """`config` validates the file with the Compose this machine has (no engine needed)."""
    if shutil.which("docker-compose"):
        command = ["docker-compose"]
    elif (
        shutil.which("docker")
        and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
    ):
        command = ["docker", "compose"]
    else:
        pytest.skip("no Compose on this machine")
    for profiles in ([], ["--profile", "redis", "--profile", "jaeger"]):
        done = subprocess.run(
            [*command, *profiles, "-f", str(REPO / "compose.yaml"), "config", "--quiet"],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr
        assert "WARNING" not in done.stderr, done.stderr
