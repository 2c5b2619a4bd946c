"""Encrypted reasoning: stateless chaining (``store: false``) with reasoning items.

With ``include: ["reasoning.encrypted_content"]`` each reasoning item of the output
carries ``encrypted_content``: its reasoning text sealed (``turnpike.gateway.sealed.sealing``) for the
tenant, purpose ``"reasoning"``. A client that keeps no state on the server re-sends
its history, that reasoning item included; its ``encrypted_content`` is opened here and
the item gets its reasoning text back, so it is the item the response produced and
renders as that one would on the chained path (``previous_response_id``). A blob that
does not open (changed, another tenant's, malformed) is the client's 400, naming the
item's ``encrypted_content``.
"""

from __future__ import annotations

from turnpike.gateway.protocol.errors import invalid
from turnpike.gateway.protocol.items import Item
from turnpike.gateway.sealed.sealing import Sealer, SealError

PURPOSE = "reasoning"
INCLUDE = "reasoning.encrypted_content"


def seal(sealer: Sealer, tenant: str, text: str) -> str:
    return sealer.seal(text.encode(), tenant, PURPOSE)


def open_items(sealer: Sealer, tenant: str, items: list[Item], param: str = "input") -> None:
    """Give each reasoning item that carries ``encrypted_content`` its reasoning text."""
    for i, item in enumerate(items):
        blob = item.get("encrypted_content") if item["type"] == "reasoning" else None
        if blob is None:
            continue
        try:
            text = sealer.open(blob, tenant, PURPOSE).decode()
        except (SealError, UnicodeDecodeError) as err:
            raise invalid(
                f"Invalid '{param}[{i}].encrypted_content': the reasoning item could not be "
                f"verified or decrypted ({err}).",
                f"{param}[{i}].encrypted_content",
                "invalid_encrypted_content",
            ) from None
        item["content"] = [{"type": "reasoning_text", "text": text}]
