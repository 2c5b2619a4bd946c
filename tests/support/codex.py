"""Runs the real Codex CLI against a Turnpike base URL: the Codex tests' names for
``bench.codex.cli``, which the Codex benchmark shares (see its docstring)."""

from __future__ import annotations

import sys

from support.paths import REPO_ROOT

# bench/ is not installed: it is imported from the repository's root.
_ROOT = str(REPO_ROOT)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from bench.codex.cli import (  # noqa: E402
    ENV_KEY,
    MODEL,
    PROVIDER,
    TEMPLATE_MODEL,
    CodexResult,
    codex_binary,
    codex_config,
    codex_home,
    model_catalog,
    run_codex,
)

__all__ = [
    "ENV_KEY",
    "MODEL",
    "PROVIDER",
    "TEMPLATE_MODEL",
    "CodexResult",
    "codex_binary",
    "codex_config",
    "codex_home",
    "model_catalog",
    "run_codex",
]
