"""deploy/k8s, validated offline: every manifest against the Kubernetes JSON schemas
(kubernetes-validate ships them; strict, so an unknown or misspelt field fails), the
kustomizations' resource lists against the files, and the wiring between objects
(selectors, ports, probes, the ConfigMap's addresses, the workers the router is told of)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

# In requirements.lock; `make test` installs it (an older environment skips, saying why).
kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed: run `make venv`"
)

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
BASE = K8S / "base"
REDIS = K8S / "components" / "redis"
# The oldest Kubernetes the manifests promise (gRPC probes are GA since 1.27), and the
# newest the package knows.
VERSIONS = ["1.30.0", kubernetes_validate.utils.latest_version()]
SERVICES = ("gateway", "safety", "tokenizer", "router", "billing", "imageres", "worker")
WORKLOADS = ("Deployment", "StatefulSet")


def documents(folder: Path) -> list[tuple[str, dict]]:
    found = []
    for path in sorted(folder.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((path.name, doc))
    return found


ALL_DOCS = documents(BASE) + documents(REDIS)


def objects(kind: str, docs=ALL_DOCS) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for _, d in docs if d["kind"] == kind}


def containers() -> list[tuple[str, dict, dict]]:
    """(workload name, pod spec, container) for every container."""
    found = []
    for _, doc in ALL_DOCS:
        if doc["kind"] in WORKLOADS:
            pod = doc["spec"]["template"]["spec"]
            found += [(doc["metadata"]["name"], pod, c) for c in pod["containers"]]
    return found


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(
    "name, doc", ALL_DOCS, ids=[f"{n}:{d['kind']}/{d['metadata']['name']}" for n, d in ALL_DOCS]
)
def test_manifest_is_valid_against_the_kubernetes_schema(name, doc, version):
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("folder, kind", [(BASE, "Kustomization"), (REDIS, "Component")])
def test_kustomization_lists_exactly_the_manifests_of_its_folder(folder, kind):
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    assert kustomization["kind"] == kind
    assert kustomization["apiVersion"].startswith("kustomize.config.k8s.io/")
    listed = kustomization["resources"]
    assert len(listed) == len(set(listed))
    present = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(listed) == present


def test_every_service_has_a_workload_and_a_service():
    workloads = {n for _, d in ALL_DOCS if d["kind"] in WORKLOADS for n in [d["metadata"]["name"]]}
    assert workloads == {*SERVICES, "redis"}
    assert set(objects("Service")) == {*SERVICES, "redis"}


def test_selectors_match_pod_labels_and_ports_exist():
    pods = {}
    for _, doc in ALL_DOCS:
        if doc["kind"] in WORKLOADS:
            spec = doc["spec"]
            labels = spec["template"]["metadata"]["labels"]
            assert spec["selector"]["matchLabels"].items() <= labels.items()
            pods[doc["metadata"]["name"]] = (labels, spec["template"]["spec"])
    for name, service in objects("Service").items():
        selector = service["spec"]["selector"]
        [(labels, pod)] = [p for p in pods.values() if selector.items() <= p[0].items()]
        port_names = {p["name"] for c in pod["containers"] for p in c["ports"]}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, (name, port)


def test_containers_run_as_non_root_with_probes_and_resources():
    for workload, pod, container in containers():
        security = pod["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] != 0, workload
        assert security["seccompProfile"]["type"] == "RuntimeDefault"
        assert pod["automountServiceAccountToken"] is False
        own = container["securityContext"]
        assert own["allowPrivilegeEscalation"] is False
        assert own["readOnlyRootFilesystem"] is True
        assert own["capabilities"]["drop"] == ["ALL"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert probe in container, (workload, probe)
        resources = container["resources"]
        assert resources["requests"]["cpu"] and resources["requests"]["memory"]
        assert resources["limits"]["memory"], workload
        if workload != "redis":
            assert pod["securityContext"]["runAsUser"] == 10001  # the images' user
            assert container["image"] == f"turnpike/{workload}:local"


def test_no_pod_reaches_the_node_and_only_scratch_or_data_is_writable():
    """Beside the security contexts above: nothing of the node (its network, processes,
    file system), no privileged container, and the only volumes are scratch space
    (emptyDir) and the ledger's claim."""
    for workload, pod, container in containers():
        for shared in ("hostNetwork", "hostPID", "hostIPC"):
            assert not pod.get(shared), (workload, shared)
        assert not container["securityContext"].get("privileged"), workload
        assert not container["securityContext"]["capabilities"].get("add"), workload
        for volume in pod.get("volumes", []):
            kinds = set(volume) - {"name"}
            assert kinds <= {"emptyDir", "persistentVolumeClaim"}, (workload, volume)
        for mount in container.get("volumeMounts", []):
            assert mount["mountPath"] in ("/tmp", "/var/lib/turnpike/billing", "/data"), mount


def mebibytes(quantity: str) -> int:
    match = re.fullmatch(r"(\d+)(Mi|Gi)", quantity)
    assert match, quantity
    number, unit = match.groups()
    return int(number) * (1024 if unit == "Gi" else 1)


def test_memory_limits_match_compose():
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]
    for workload, _, container in containers():
        service = {"worker": "worker-1", "gateway": "gateway-1"}.get(workload, workload)
        compose_limit = int(str(compose[service]["mem_limit"]).rstrip("m"))
        assert mebibytes(container["resources"]["limits"]["memory"]) == compose_limit, workload


def test_backends_use_grpc_health_and_the_gateway_http():
    for workload, _, container in containers():
        if workload == "redis":
            continue
        port = container["ports"][0]["containerPort"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            spec = container[probe]
            if workload == "gateway":
                assert spec["httpGet"]["path"] in ("/healthz", "/readyz")
            else:
                assert spec["grpc"]["port"] == port
        if workload == "gateway":
            assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_config_addresses_point_at_the_services():
    config = objects("ConfigMap")["turnpike-config"]["data"]
    services = objects("Service")
    for backend in ("safety", "tokenizer", "router", "billing", "imageres"):
        host, port = config[f"TURNPIKE_{backend.upper()}_ADDR"].split(":")
        assert host == backend
        assert int(port) == services[backend]["spec"]["ports"][0]["port"]


def test_the_router_is_told_of_every_worker_replica():
    worker = objects("StatefulSet")["worker"]
    replicas = worker["spec"]["replicas"]
    assert replicas >= 2
    assert objects("Service")["worker"]["spec"]["clusterIP"] == "None"  # stable pod names
    config = objects("ConfigMap")["turnpike-config"]["data"]
    expected = ",".join(f"worker-{i}=worker-{i}.worker:50061" for i in range(replicas))
    assert config["TURNPIKE_WORKERS"] == expected
    env = {e["name"]: e for e in worker["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TURNPIKE_WORKER_ID"]["value"] == "$(POD_NAME)"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"


def test_the_billing_ledger_is_on_a_claim_and_has_one_writer():
    billing = objects("Deployment")["billing"]
    assert billing["spec"]["replicas"] == 1 and billing["spec"]["strategy"]["type"] == "Recreate"
    pod = billing["spec"]["template"]["spec"]
    [claim] = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert claim["persistentVolumeClaim"]["claimName"] in objects("PersistentVolumeClaim")
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == claim["name"]]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["TURNPIKE_BILLING_LEDGER"].startswith(mount["mountPath"] + "/")


def dotenv_settings() -> dict[str, str]:
    """The TURNPIKE_* settings .env gives a value (an empty one means "off", as unset)."""
    values = {}
    for line in (REPO / ".env").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.startswith("TURNPIKE_") and value:
            values[key] = value
    return values


def test_every_setting_env_gives_a_value_is_set_alike_in_kubernetes():
    """.env is the one place that configures the stack; the base must not lag behind it
    (a new bound added there would otherwise run on Kubernetes at its code default)."""
    settings = dict(objects("ConfigMap")["turnpike-config"]["data"])
    settings |= objects("Secret")["turnpike-api-keys"]["stringData"]
    missing = sorted(set(dotenv_settings()) - set(settings))
    assert not missing, f"set in .env, not in deploy/k8s/base/config.yaml: {missing}"
    for key, value in dotenv_settings().items():
        assert settings[key] == value, key


def test_variables_are_standard_otel_or_read_by_a_service():
    code = "\n".join(p.read_text() for p in (REPO / "src").rglob("*.py"))
    names = set(objects("ConfigMap")["turnpike-config"]["data"])
    names |= set(objects("Secret")["turnpike-api-keys"]["stringData"])
    for _, _, container in containers():
        names |= {e["name"] for e in container.get("env", [])}
    for name in names - {"POD_NAME"}:
        assert name.startswith("OTEL_") or f'"{name}"' in code, name


def test_redis_is_optional():
    base = documents(BASE)
    assert "redis" not in objects("Deployment", base) and "redis" not in objects("Service", base)
    base_text = "\n".join(p.read_text() for p in BASE.glob("*.yaml"))
    assert "redis" not in base_text.replace("components/redis", "")


def test_prometheus_scrapes_every_turnpike_pod_on_its_metrics_port():
    from turnpike.catalogue import service

    for workload, doc in {**objects("Deployment"), **objects("StatefulSet")}.items():
        if workload == "redis":
            continue
        template = doc["spec"]["template"]
        annotations = template["metadata"]["annotations"]
        [container] = template["spec"]["containers"]
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert annotations["prometheus.io/scrape"] == "true", workload
        assert annotations["prometheus.io/path"] == "/metrics", workload
        metrics_port = service(workload).metrics_port
        assert int(annotations["prometheus.io/port"]) == ports["metrics"] == metrics_port
