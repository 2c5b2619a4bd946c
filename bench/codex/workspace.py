"""A task's working folder: a fresh git repository with one committed file, and what the
task left in it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

README = "# Demo project\n\nA small repository that the Codex benchmark works in.\n"
# A fixed identity and no global or system config, so the commit never depends on the
# machine's git setup.
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.invalid",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
}


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", *args],
        cwd=repo,
        env={**_GIT_ENV, "PATH": os.environ.get("PATH", "")},
        check=True,
        capture_output=True,
        timeout=30,
    )


def make_repo(folder: Path) -> Path:
    """``folder``: a new git repository whose one commit holds README.md."""
    folder.mkdir(parents=True, exist_ok=False)
    _git(folder, "init", "--quiet", "--initial-branch=main")
    (folder / "README.md").write_text(README)
    _git(folder, "add", "README.md")
    _git(folder, "commit", "--quiet", "-m", "Initial commit")
    return folder


def missing_files(repo: Path, names: Iterable[str]) -> list[str]:
    """The files of ``names`` that are not in ``repo`` (or are empty)."""
    return [n for n in names if not (repo / n).is_file() or (repo / n).stat().st_size == 0]
