"""The images' requirement subsets (deploy/requirements/) agree with requirements.lock,
and each service's list is complete: every package's own dependencies are in it or in
common.txt. Static: no Docker needed."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "deploy" / "requirements"
SERVICES = ("gateway", "safety", "tokenizer", "router", "billing", "imageres", "worker")
# What each service's code imports (its roots); the lists must hold their closure.
ROOTS = {
    "common": [
        "grpcio",
        "grpcio-health-checking",
        "protobuf",
        "opentelemetry-sdk",
        "opentelemetry-exporter-otlp-proto-grpc",
        "opentelemetry-instrumentation-grpc",
        "prometheus-client",
        "pydantic-settings",
    ],
    # async-timeout: redis needs it on the images' Python (Debian's 3.11.2), not on ours.
    "gateway": [
        "fastapi",
        "orjson",
        "uvicorn",
        "uvloop",
        "httptools",
        "websockets",
        "wsproto",
        "pillow",
        "redis",
        "async-timeout",
        "pyyaml",
        "jsonschema",
        "cryptography",
        "pypdfium2",
    ],
    "safety": ["alt-profanity-check"],
    "tokenizer": ["openai-harmony", "bpe-openai"],
    "worker": ["openai-harmony", "bpe-openai", "cerebras-cloud-sdk", "openai", "lark", "regex"],
    "imageres": ["pillow"],
    "router": [],
    "billing": [],
}


def pins(path: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"{path.name}: {line!r} is not pinned with =="
        key = canonicalize_name(name)
        assert key not in found, f"{path.name}: {name} twice"
        found[key] = version.strip()
    return found


def lock() -> dict[str, str]:
    return pins(REPO / "requirements.lock")


def dependencies(name: str, extras: frozenset[str] = frozenset()) -> set[Requirement]:
    """What the installed distribution ``name`` needs at run time, with ``extras``."""
    needed = set()
    for raw in metadata.requires(name) or []:
        req = Requirement(raw)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in {"", *extras}):
            needed.add(req)
    return needed


def test_every_service_has_a_list_and_nothing_else_does():
    names = {p.stem for p in REQUIREMENTS.glob("*.txt")}
    assert names == {*SERVICES, "common", "installer"}


@pytest.mark.parametrize("name", ["common", "installer", *SERVICES])
def test_pins_agree_with_the_lock(name):
    locked = lock()
    listed = pins(REQUIREMENTS / f"{name}.txt")
    if name == "installer":
        assert set(listed) == {"pip"}  # pip is not in the lock: it installs the lock
        return
    for package, version in listed.items():
        assert package in locked, f"{name}.txt: {package} is not in requirements.lock"
        assert locked[package] == version, (
            f"{name}.txt pins {package}=={version}, requirements.lock {locked[package]}"
        )


def closure(roots: list[str]) -> set[str]:
    """Every distribution ``roots`` need, following requested extras (httpx[http2])."""
    seen: dict[str, frozenset[str]] = {}
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        package, extras = canonicalize_name(req.name), frozenset(req.extras)
        if package in seen and extras <= seen[package]:
            continue
        seen[package] = seen.get(package, frozenset()) | extras
        todo += dependencies(package, seen[package])
    return set(seen)


def test_common_holds_exactly_the_closure_of_its_roots():
    """Nothing in every image that no service needs, and nothing missing."""
    assert set(pins(REQUIREMENTS / "common.txt")) == closure(ROOTS["common"])


@pytest.mark.parametrize("service", SERVICES)
def test_each_image_gets_exactly_the_closure_of_its_roots(service):
    common = pins(REQUIREMENTS / "common.txt")
    own = pins(REQUIREMENTS / f"{service}.txt")
    assert not set(common) & set(own), f"{service}.txt repeats common packages"
    needed = closure(ROOTS["common"] + ROOTS[service])
    listed = set(common) | set(own)
    assert not needed - listed, f"{service}: missing {sorted(needed - listed)}"
    assert not listed - needed, f"{service}: not needed {sorted(listed - needed)}"
