"""Where the checkout is, for tests at any depth of tests/ (unit/<package>/, stack/,
containers/): a test names the repository's files from here, never from its own
``__file__``, so moving a test to another folder cannot point it somewhere else."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
