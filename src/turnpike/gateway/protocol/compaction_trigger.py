"""The ``compaction_trigger`` input item: the final item of a create that asks for a
compaction instead of a generation (``turnpike.gateway.sealed.compaction``). Pure: no I/O."""

from __future__ import annotations

from turnpike.gateway.protocol.errors import invalid
from turnpike.gateway.protocol.items import Item

TRIGGER = "compaction_trigger"


def take_trigger(items: list[Item], param: str = "input") -> tuple[list[Item], bool]:
    """(``items`` without their final ``compaction_trigger``, whether there was one). A
    trigger anywhere else is the client's 400: it must be the final input item."""
    for i, item in enumerate(items[:-1]):
        if item["type"] == TRIGGER:
            raise invalid(
                f"Invalid '{param}[{i}]': a 'compaction_trigger' item must be the final "
                "input item.",
                f"{param}[{i}].type",
                "invalid_value",
            )
    if items and items[-1]["type"] == TRIGGER:
        return items[:-1], True
    return items, False
