"""Dependencies are declared once, in pyproject.toml (one extra per service), and pinned in
requirements.lock: the images' lists (deploy/requirements/) are what `make requirements`
writes from both, and the lock holds exactly what pyproject.toml declares."""

from __future__ import annotations

import tomllib

from packaging.requirements import Requirement
from support.paths import REPO_ROOT
from support.scripts import load_script

from turnpike.catalogue import SERVICES

gen_requirements = load_script("gen_requirements", REPO_ROOT / "scripts" / "gen_requirements.py")

PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
# What `pip freeze` leaves out of the lock on Python 3.11 (the venv has them anyway).
NOT_FROZEN = {"pip", "setuptools", "wheel", "distribute"}


def test_the_images_lists_are_current():
    stale = [
        str(path)
        for path, text in gen_requirements.render().items()
        if not (REPO_ROOT / path).is_file() or (REPO_ROOT / path).read_text() != text
    ]
    assert not stale, (
        f"differ from pyproject.toml and requirements.lock, run `make requirements`: {stale}"
    )


def test_every_service_has_an_extra_and_a_list_and_nothing_else_does():
    services = {svc.name for svc in SERVICES}
    assert set(PROJECT["optional-dependencies"]) == services | {"dev"}
    lists = {path.name for path in (REPO_ROOT / gen_requirements.LISTS).glob("*.txt")}
    assert lists == {f"{name}.txt" for name in services | {"common", "installer"}}


def test_the_installer_list_pins_pip_only():
    """pip runs the image builds from its wheel; it is not in the lock, which it installs."""
    lines = (REPO_ROOT / gen_requirements.INSTALLER).read_text().splitlines()
    [pin] = [line for line in lines if line.strip() and not line.startswith("#")]
    name, pinned, version = pin.partition("==")
    assert (name, pinned) == ("pip", "==") and version


def test_the_lock_holds_exactly_what_pyproject_declares():
    """What `make lock` would freeze: the closure of every extra (dev names them all)."""
    declared = gen_requirements.direct(PROJECT, "")
    for extra in PROJECT["optional-dependencies"]:
        declared += gen_requirements.direct(PROJECT, extra)
    needed = gen_requirements.closure(declared) - NOT_FROZEN
    locked = set(gen_requirements.read_lock())
    assert not needed - locked, f"not in requirements.lock, run `make lock`: {needed - locked}"
    assert not locked - needed, f"requirements.lock holds what nothing needs: {locked - needed}"


def test_markers_are_read_for_the_images_platform():
    """Linux CPython 3.11.2 (Debian bookworm's), whatever runs the generator: redis needs
    async-timeout below 3.11.3; click needs colorama only on Windows; an extra is followed
    only when asked for. (Only locked packages: a fresh venv holds nothing else.)"""
    assert "async-timeout" in gen_requirements.closure([Requirement("redis")])
    assert "colorama" not in gen_requirements.closure([Requirement("click")])
    assert "openai" in gen_requirements.closure([Requirement("pydantic-ai-slim[openai]")])
    assert "openai" not in gen_requirements.closure([Requirement("pydantic-ai-slim")])
