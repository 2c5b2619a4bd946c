"""The dependency rules of the layout (src/turnpike):

- the services (``turnpike.gateway``, ``turnpike.safety``, ...) never import each other's
  code, only each other's wire stubs (``turnpike.<service>.v1``);
- the gateway's layers import only the layers below them;
- the shared library (the modules at the top of ``turnpike``) imports no service.

The first two are import-linter contracts, declared in pyproject.toml.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from support.paths import REPO_ROOT

PACKAGE_DIR = REPO_ROOT / "src" / "turnpike"
SERVICES = sorted(p.name for p in PACKAGE_DIR.iterdir() if (p / "__main__.py").is_file())


def imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_every_service_is_seen() -> None:
    assert {"gateway", "safety", "tokenizer", "router", "worker", "billing", "imageres"} <= set(
        SERVICES
    )


def test_the_import_contracts_hold() -> None:
    # In a process of its own: import-linter configures logging as it starts, which
    # disables every logger already made (the tests after it then capture no record).
    lint_imports = Path(sys.executable).parent / "lint-imports"
    lint = [str(lint_imports), "--config", "pyproject.toml", "--no-logo"]
    result = subprocess.run(lint, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_shared_library_imports_no_service() -> None:
    shared = [p for p in PACKAGE_DIR.glob("*.py")]
    assert len(shared) > 10
    for path in shared:
        services = {
            module
            for module in imported_modules(path)
            if module.split(".")[:2] in (["turnpike", s] for s in SERVICES) and ".v1" not in module
        }
        assert not services, (path.name, sorted(services))
