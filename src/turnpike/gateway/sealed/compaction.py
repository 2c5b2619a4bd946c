"""Compaction (``POST /v1/responses/compact``, ``compaction_trigger`` input items, and
``compaction`` input items).

The simulator cannot summarize, so the policy is deterministic: the whole history is
sealed, whole and in order, into exactly one ``compaction`` item (clients such as the
Codex CLI and the Open Responses compliance suite expect exactly one). Its
``encrypted_content`` (see ``turnpike.gateway.sealed.sealing``) holds the replaced items and a digest of
them (how many, of which types, their hash). Instructions are a request parameter, not
an item: the client sends them again.

A ``compaction_trigger`` item, the final input item of a create, asks for that item
instead of a generation: the response's only output is the compaction item; its usage
counts the compacted conversation as input tokens and no output tokens (nothing is
generated). With ``context_management`` on create, past the threshold, the whole
conversation so far is sealed into one compaction item, first in the response's output.

A ``compaction`` item in a create request's input is opened with the tenant's key and
replaces the items before it (what it holds, sent back or not) by the items it holds
before anything else sees the input, so the model renders exactly the history that was
compacted (and the render caches, which key by content, see the same items).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import orjson

from turnpike.gateway.protocol.errors import invalid
from turnpike.gateway.protocol.items import Item
from turnpike.gateway.protocol.json_codec import dump_bytes
from turnpike.gateway.sealed.sealing import Sealer, SealError
from turnpike.ids import new_id

PURPOSE = "compaction"


def _is_user(item: Item) -> bool:
    return item.get("type") == "message" and item.get("role") == "user"


def digest(items: list[Item]) -> dict[str, Any]:
    kinds = Counter(item["type"] for item in items)
    return {
        "items": len(items),
        "types": dict(sorted(kinds.items())),
        "user_messages": sum(1 for item in items if _is_user(item)),
        "sha256": hashlib.sha256(dump_bytes(items, sort_keys=True)).hexdigest(),
    }


def seal_items(sealer: Sealer, tenant: str, items: list[Item]) -> Item:
    """One compaction item holding ``items`` (without compaction items: those in a stored
    history render to nothing, the items they replaced being there too)."""
    items = [item for item in items if item["type"] != "compaction"]
    payload = dump_bytes({"items": items, "digest": digest(items)})
    return {
        "id": new_id("cmp"),
        "type": "compaction",
        "encrypted_content": sealer.seal(payload, tenant, PURPOSE),
    }


def compact(sealer: Sealer, tenant: str, items: list[Item]) -> list[Item]:
    """The compacted list: exactly one compaction item holding all of ``items``."""
    return [seal_items(sealer, tenant, items)]


def expand(sealer: Sealer, tenant: str, items: list[Item], param: str = "input") -> list[Item]:
    """``items`` with the last compaction item replaced by the items it holds; the items
    before it are what it replaced (a client may send them back, or not). A blob that
    does not open (changed, another tenant's, malformed) is the client's 400."""
    last = max((i for i, item in enumerate(items) if item["type"] == "compaction"), default=None)
    if last is None:
        return items
    for i, item in enumerate(items[:last]):
        if item["type"] == "compaction":  # each must still be sound
            _open(sealer, tenant, item["encrypted_content"], f"{param}[{i}]")
    held = _open(sealer, tenant, items[last]["encrypted_content"], f"{param}[{last}]")
    return [*held, *items[last + 1 :]]


def _open(sealer: Sealer, tenant: str, blob: str, param: str) -> list[Item]:
    try:
        payload = orjson.loads(sealer.open(blob, tenant, PURPOSE))
        items, check = payload["items"], payload["digest"]
        if not isinstance(items, list) or digest(items) != check:
            raise SealError("its digest does not match")
    except (SealError, ValueError, KeyError, TypeError) as err:
        raise invalid(
            f"Invalid '{param}.encrypted_content': the compaction item could not be "
            f"verified or decrypted ({err}).",
            f"{param}.encrypted_content",
            "invalid_encrypted_content",
        ) from None
    return items
