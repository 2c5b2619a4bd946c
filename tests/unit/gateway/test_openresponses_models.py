"""The models generated from the Open Responses spec (turnpike.gateway.protocol.openresponses)
are current: their header names the sha256 of the spec they came from. A changed spec
without ``make models`` fails here; the check needs no generator."""

from __future__ import annotations

import hashlib
import re

from support.paths import REPO_ROOT

from turnpike.gateway.protocol import openresponses

SPEC = REPO_ROOT / "specs" / "openresponses-openapi.json"
MODULE = REPO_ROOT / "src" / "turnpike" / "gateway" / "protocol" / "openresponses.py"


def test_the_models_come_from_the_current_spec() -> None:
    header = MODULE.read_text()[:400]
    found = re.search(r"^# spec sha256: ([0-9a-f]{64})$", header, re.MULTILINE)
    assert found, "no spec sha256 in the header of turnpike/gateway/protocol/openresponses.py"
    assert found.group(1) == hashlib.sha256(SPEC.read_bytes()).hexdigest(), (
        "specs/openresponses-openapi.json changed: run `make models`"
    )


def test_the_create_body_extends_the_spec_body() -> None:
    from turnpike.gateway.protocol.create_body import CreateBody

    assert issubclass(CreateBody, openresponses.CreateResponseBody)
    assert set(openresponses.CreateResponseBody.model_fields) <= set(CreateBody.model_fields)
