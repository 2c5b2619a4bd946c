"""The devstack layout with every service swapped for a stand-in (``standin_grpc`` for
backends, ``standin_http`` for the gateway), and ``python -m turnpike.devstack`` run over it.

Run as a program it is ``python -m turnpike.devstack`` with the stand-ins; the children find
the stand-in modules through PYTHONPATH, which the caller sets to this folder.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from turnpike.devstack import ServiceSpec, StackConfig, default_services
from turnpike.devstack.__main__ import main

SUPPORT_DIR = Path(__file__).resolve().parent


def standin_services(
    config: StackConfig, overrides: Mapping[str, Mapping[str, str]] | None = None
) -> list[ServiceSpec]:
    """``default_services(config)`` with stand-in modules; each health/readiness probe
    fails twice before succeeding. ``overrides`` adds variables per service name."""
    overrides = overrides or {}
    services = default_services(config)
    backends = ",".join(config.address(s.port) for s in services if s.kind == "grpc")
    swapped = []
    for spec in services:
        if spec.kind == "grpc":
            extra = {"STANDIN_PORT": str(spec.port), "STANDIN_NOT_SERVING_CHECKS": "2"}
            module = "standin_grpc"
        else:
            extra = {"STANDIN_NOT_READY_CHECKS": "2", "STANDIN_BACKENDS": backends}
            module = "standin_http"
        env = {**spec.env, **extra, **overrides.get(spec.name, {})}
        swapped.append(replace(spec, module=module, env=env))
    return swapped


if __name__ == "__main__":
    # STANDIN_OVERRIDES: JSON {service name: {VAR: value}}.
    overrides = json.loads(os.environ.get("STANDIN_OVERRIDES", "{}"))
    sys.exit(main(sys.argv[1:], services=lambda cfg: standin_services(cfg, overrides)))
