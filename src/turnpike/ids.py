"""Identifier helpers. Ids look like OpenAI's: a type prefix and random hex."""

from __future__ import annotations

import secrets


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(16)}"
