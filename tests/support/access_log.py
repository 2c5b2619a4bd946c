"""The gateway's access lines (``turnpike.gateway.observability.access_log``) in a captured log."""

from __future__ import annotations

import json
from pathlib import Path


def access_lines(log: Path) -> list[dict]:
    """Every access line of ``log``, as the JSON object it carries, oldest first."""
    lines = []
    for line in log.read_text().splitlines():
        _, marker, payload = line.partition(" turnpike.access: ")
        if marker:
            lines.append(json.loads(payload))
    return lines
