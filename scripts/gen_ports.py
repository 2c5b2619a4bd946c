"""Write the ports of the service catalogue (src/turnpike/catalogue.py) into the
files that cannot import it: .env (Compose) and the Kubernetes base (deploy/k8s/base).

Run through ``make ports`` after changing a port in the catalogue. Only the port values
are rewritten; everything else in those files is edited by hand.
``tests/unit/turnpike/test_ports.py`` renders the files the same way and fails when the
committed ones differ.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

from turnpike.catalogue import BACKENDS, SERVICES, WORKER, Service

ROOT = Path(__file__).resolve().parent.parent
DOTENV = Path(".env")
K8S_BASE = Path("deploy/k8s/base")
K8S_CONFIG = K8S_BASE / "config.yaml"


def _sub(pattern: str, value: object, text: str, where: Path) -> str:
    """Replace the number after each match of ``pattern`` (a regex ending just before
    it) with ``value``; a pattern found nowhere means the file changed shape, so fail
    rather than leave a port behind."""
    new, count = re.subn(rf"(?m)({pattern})\d+", rf"\g<1>{value}", text)
    if not count:
        raise SystemExit(f"gen_ports: no {pattern!r} in {where}: update scripts/gen_ports.py")
    return new


def dotenv_variable(svc: Service) -> str:
    """The port's name in .env, as compose.yaml uses it (${SAFETY_PORT})."""
    return f"{svc.name.upper()}_PORT"


def render_dotenv(text: str, services: Sequence[Service]) -> str:
    for svc in services:
        text = _sub(rf"^{dotenv_variable(svc)}=", svc.port, text, DOTENV)
    return text


def render_manifest(text: str, svc: Service, where: Path) -> str:
    """A service's own manifest: every numeric port in it is the service's (the
    container's port, its probes, its Service), as is its port variable; but the
    container port named metrics and the pod's prometheus.io/port annotation, which are
    its metrics port (written last, over the first rule's value)."""
    text = _sub(r"^\s*(?:- )?(?:containerPort|port): ", svc.port, text, where)
    text = _sub(rf"- name: {svc.port_variable}\n\s*value: '", svc.port, text, where)
    text = _sub(r"- name: metrics\n\s*containerPort: ", svc.metrics_port, text, where)
    return _sub(r"prometheus\.io/port: '", svc.metrics_port, text, where)


def render_config_map(text: str, services: Sequence[Service]) -> str:
    """Where the gateway finds each backend, and the router its workers."""
    by_name = {svc.name: svc for svc in services}
    for backend in BACKENDS:
        svc = by_name[backend.name]
        text = _sub(rf"^\s*{svc.address_variable}: {svc.name}:", svc.port, text, K8S_CONFIG)
    return _sub(r"\.worker:", by_name[WORKER.name].port, text, K8S_CONFIG)


def render(root: Path = ROOT, services: Sequence[Service] = SERVICES) -> dict[Path, str]:
    """Every file's text with the catalogue's ports, by path relative to ``root``."""
    out = {DOTENV: render_dotenv((root / DOTENV).read_text(), services)}
    out[K8S_CONFIG] = render_config_map((root / K8S_CONFIG).read_text(), services)
    for svc in services:
        path = K8S_BASE / f"{svc.name}.yaml"
        out[path] = render_manifest((root / path).read_text(), svc, path)
    return out


def main() -> int:
    for path, text in render().items():
        if (ROOT / path).read_text() != text:
            (ROOT / path).write_text(text)
            print(f"gen_ports: wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
