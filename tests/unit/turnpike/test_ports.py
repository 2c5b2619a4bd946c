"""Ports are written once, in the service catalogue (src/turnpike/catalogue.py):
the files that cannot import it (.env, the Kubernetes base) carry what `make ports`
writes from it, and nothing else repeats it."""

from __future__ import annotations

import dataclasses
import re

import yaml
from support.paths import REPO_ROOT
from support.scripts import load_script

from turnpike.catalogue import SERVICES, WORKER

ROOT = REPO_ROOT


gen_ports = load_script("gen_ports", ROOT / "scripts" / "gen_ports.py")


def test_dotenv_and_the_kubernetes_base_carry_the_catalogue_ports():
    stale = [str(p) for p, text in gen_ports.render().items() if (ROOT / p).read_text() != text]
    assert not stale, f"ports differ from src/turnpike/catalogue.py, run `make ports`: {stale}"


def test_moving_every_port_in_the_catalogue_leaves_no_old_port_behind():
    """The generator reaches every place a port is written: with every port moved, none
    of the old numbers is left, and the files still say the new ones."""
    moved = [
        dataclasses.replace(s, port=s.port + 7, metrics_port=s.metrics_port + 7) for s in SERVICES
    ]
    rendered = gen_ports.render(services=moved)
    for old, new in zip(SERVICES, moved, strict=True):
        manifest = rendered[gen_ports.K8S_BASE / f"{old.name}.yaml"]
        assert not re.search(rf"\b({old.port}|{old.metrics_port})\b", manifest), old.name
        docs = [d for d in yaml.safe_load_all(manifest) if d]
        [workload] = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
        [container] = workload["spec"]["template"]["spec"]["containers"]
        assert container["ports"][0]["containerPort"] == new.port
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["metrics"] == new.metrics_port, old.name
        annotations = workload["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/port"] == str(new.metrics_port), old.name
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env[old.port_variable] == str(new.port)
        [service] = [d for d in docs if d["kind"] == "Service"]
        assert service["spec"]["ports"][0]["port"] == new.port
        assert f"\n{gen_ports.dotenv_variable(old)}={new.port}\n" in rendered[gen_ports.DOTENV]
    [config] = [
        d["data"]
        for d in yaml.safe_load_all(rendered[gen_ports.K8S_CONFIG])
        if d["kind"] == "ConfigMap"
    ]
    for new in moved:
        if new.address_variable:
            assert config[new.address_variable] == f"{new.name}:{new.port}"
    worker_port = WORKER.port + 7
    assert all(w.endswith(f":{worker_port}") for w in config["TURNPIKE_WORKERS"].split(","))


def test_the_service_table_of_the_docs_shows_the_catalogue_ports():
    page = (ROOT / "docs" / "architecture.md").read_text()
    for svc in SERVICES:
        if svc is WORKER:
            row = f"| worker-1, worker-2 | {svc.port}, {svc.port + 1} |"
        else:
            row = f"| {svc.name} | {svc.port}"
        assert row in page, f"the service table of docs/architecture.md: {row!r}"
