"""Variants of the stack measured side by side in one run (``--variant``), so that a
before and an after, or tracing off and on, meet the same machine at the same time: every
stack is started at once and their cells alternate.

A variant is written ``NAME`` (this checkout, as it is) or ``NAME=PART+PART...``:

- ``rev:REV``: the code of a git revision (``rev:HEAD~1``, ``rev:d8b2934``), exported
  with ``git archive`` into ``var/bench/revisions/<commit>`` and its stubs generated
  there; its processes import it first (``PYTHONPATH``), with this checkout's
  environment and devstack, so the revision must take the same settings;
- ``tracing``: every span of every service exported over OTLP to a collector on
  loopback (``bench.load.collector``, a process of its own), with the SDK's defaults
  otherwise, as a platform team runs it;
- ``env:NAME=VALUE``: a setting for every process of that stack.

Examples: ``--variant before=rev:HEAD~1 --variant after``;
``--variant off --variant traced=tracing``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REVISIONS = REPO / "var" / "bench" / "revisions"


@dataclass(frozen=True)
class Variant:
    name: str
    revision: str | None = None  # None: this checkout as it is
    tracing: bool = False
    env: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        parts = [f"revision {self.revision}" if self.revision else "this checkout"]
        if self.tracing:
            parts.append("tracing to a collector on loopback")
        parts += [f"{name}={value}" for name, value in self.env]
        return ", ".join(parts)


def parse_variant(text: str) -> Variant:
    name, sep, spec = text.partition("=")
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise argparse.ArgumentTypeError(f"a variant's name is letters, digits, - or _: {text!r}")
    revision, tracing, env = None, False, []
    for part in spec.split("+") if sep else ():
        kind, _, value = part.partition(":")
        if kind == "rev" and value:
            revision = value
        elif kind == "tracing" and not value:
            tracing = True
        elif kind == "env" and "=" in value and not value.startswith("="):
            setting, _, setting_value = value.partition("=")
            env.append((setting, setting_value))
        else:
            raise argparse.ArgumentTypeError(
                f"{part!r} in {text!r}: expected rev:REV, tracing or env:NAME=VALUE"
            )
    return Variant(name, revision, tracing, tuple(env))


def tracing_env(port: int) -> dict[str, str]:
    """Every span exported to the collector on ``port``; the batch processor's
    defaults (``OTEL_BSP_*``) untouched."""
    return {
        "OTEL_SDK_DISABLED": "false",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_TRACES_SAMPLER": "parentbased_always_on",
    }


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()


def source_of(revision: str) -> Path:
    """The ``src`` folder of ``revision``'s code, exported once and kept (its commit
    names it, so a later run reuses it)."""
    commit = _git("rev-parse", "--verify", f"{revision}^{{commit}}")
    tree = REVISIONS / commit
    if not (tree / ".complete").exists():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", commit], cwd=REPO, check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        subprocess.run([sys.executable, "scripts/gen_protos.py"], cwd=tree, check=True)
        (tree / ".complete").write_text(commit + "\n")
    return tree / "src"


def stack_env(variant: Variant, collector_port: int | None) -> dict[str, str]:
    """What every process of the variant's stack is given."""
    env = dict(variant.env)
    if variant.revision is not None:
        env["PYTHONPATH"] = str(source_of(variant.revision))
    if variant.tracing:
        assert collector_port is not None
        env.update(tracing_env(collector_port))
    return env
