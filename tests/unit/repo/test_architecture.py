"""The dependency rule of the layout: services depend on the shared library
(``services/turnpike``), never on each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from support.paths import REPO_ROOT

SERVICES_DIR = REPO_ROOT / "services"
SHARED = "turnpike"
SERVICES = sorted(
    p.name for p in SERVICES_DIR.iterdir() if (p / "__init__.py").is_file() and p.name != SHARED
)


def imported_packages(path: Path) -> set[str]:
    """The top-level packages a module imports (relative imports stay in its package)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_every_service_is_seen() -> None:
    assert {"gateway", "safety", "tokenizer", "router", "worker", "billing", "imageres"} <= set(
        SERVICES
    )


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_imports_no_other_service(service: str) -> None:
    others = set(SERVICES) - {service}
    offending = {
        str(path.relative_to(SERVICES_DIR)): sorted(imported_packages(path) & others)
        for path in (SERVICES_DIR / service).rglob("*.py")
    }
    assert {path: names for path, names in offending.items() if names} == {}


def test_the_shared_library_imports_no_service() -> None:
    for path in (SERVICES_DIR / SHARED).rglob("*.py"):
        assert not imported_packages(path) & set(SERVICES), path
