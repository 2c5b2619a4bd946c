"""A tenants file for a test gateway: tenants with fresh keys and the limits a test asks for."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from turnpike.gateway.tenancy.tenants import mint_key
from turnpike.gateway.tenancy.tenants_file import hash_key


def write_tenants(path: Path, **tenants: dict[str, Any]) -> dict[str, str]:
    """Write ``path`` with one tenant per keyword (its limits as the value); returns
    tenant -> its key."""
    keys = {name: mint_key() for name in tenants}
    table = {name: {"keys": [hash_key(keys[name])], **limits} for name, limits in tenants.items()}
    path.write_text(yaml.safe_dump({"tenants": table}))
    return keys
