"""A tenant's billed totals as the gateway's ``/usage`` reports them (billing is
asynchronous: ``billed_after`` waits for the records a test expects)."""

from __future__ import annotations

import time
from typing import Any

import httpx

from turnpike.devstack import StackEndpoints


def usage_totals(stack: StackEndpoints, tenant: str) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {stack.api_keys[tenant]}"}
    reply = httpx.get(f"{stack.base_url}/usage", headers=headers, timeout=10)
    assert reply.status_code == 200
    totals: dict[str, Any] = reply.json()
    return totals


def billed_after(
    stack: StackEndpoints, tenant: str, before: dict[str, Any], responses: int
) -> dict[str, Any]:
    """The tenant's totals once ``responses`` more were billed, or at the deadline."""
    deadline = time.monotonic() + 15
    while True:
        after = usage_totals(stack, tenant)
        if after["responses"] - before["responses"] >= responses or time.monotonic() > deadline:
            return after
        time.sleep(0.1)
