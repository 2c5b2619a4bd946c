"""How large a conversation may grow: in items, and in bytes of its items as stored (their
compact UTF-8 JSON, ``item_bytes``).

Every backend call of a turn carries the whole conversation (safety classifies it, the
tokenizer renders it, the worker gets its items), so an unbounded conversation ends in a
gRPC message over the channel's limit. The bounds hold in three places:

- the conversation store refuses an append (``POST /v1/conversations/{id}/items``, or a
  create with items) that would take a conversation past them, whole and atomically
  (``ConversationTooLarge``, a 400 ``conversation_too_large`` with ``param: "items"``);
- a turn (``conversation`` or ``previous_response_id``) whose history and input would be
  past them is refused before any backend is called (``check_turn``);
- the turn's own output is exempt when the turn joins its conversation (its input is not):
  it is bounded by ``max_output_tokens``, and refusing it would lose a response the client
  has. A conversation may so end one turn's output past the bounds, and its next turn is
  refused. Turns racing on one conversation each passed the check alone: the append
  checks again, atomically, and one that no longer fits is not added (logged).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from turnpike.gateway.protocol.errors import ApiError, echo, invalid
from turnpike.gateway.protocol.items import Item

CODE = "conversation_too_large"
# What the client can do about it, in every refusal.
REMEDY = (
    "Compact it (POST /v1/responses/compact, or context_management compaction on create) "
    "and continue from the compacted items in a new conversation, or delete items it no "
    "longer needs."
)


@dataclass(frozen=True)
class ConversationBounds:
    """Defaults as ``GatewaySettings`` (TURNPIKE_MAX_CONVERSATION_ITEMS and _BYTES)."""

    max_items: int = 10_000
    max_bytes: int = 8 * 1024 * 1024


def encode_item(item: Item) -> bytes:
    """An item as stored (the Redis store keeps exactly these bytes)."""
    return orjson.dumps(item)


def item_bytes(item: Item) -> int:
    return len(encode_item(item))


def items_bytes(items: Sequence[Item]) -> int:
    """The sum of ``item_bytes`` over ``items``, in one encoding: a JSON array is its
    items, a comma between each two, and two brackets."""
    if not items:
        return 0
    return len(orjson.dumps(list(items))) - len(items) - 1


class ConversationTooLarge(Exception):
    """Adding to a conversation would take it past its bounds: ``items`` and ``size`` are
    what it would hold (the one over its bound says which)."""

    def __init__(self, bounds: ConversationBounds, items: int, size: int) -> None:
        super().__init__(f"{items} items, {size} bytes")
        self.bounds, self.items, self.size = bounds, items, size

    def api_error(self, what: str, param: str) -> ApiError:
        """The client's 400: ``what`` the client was adding to (a conversation, named)."""
        bounds = self.bounds
        if self.items > bounds.max_items:
            over = f"{self.items} items, over the limit of {bounds.max_items} items"
        else:
            over = f"{self.size} bytes of items, over the limit of {bounds.max_bytes} bytes"
        return invalid(f"{what} would hold {over}. {REMEDY}", param, CODE)


def check_size(bounds: ConversationBounds, items: int, size: int) -> None:
    """Raise ConversationTooLarge unless ``items`` items of ``size`` bytes fit ``bounds``."""
    if items > bounds.max_items or size > bounds.max_bytes:
        raise ConversationTooLarge(bounds, items, size)


def check_turn(
    bounds: ConversationBounds,
    history: Sequence[Item],
    history_bytes: int | None,
    input_items: Sequence[Item],
    param: str,
    name: str,
) -> int:
    """A turn continues ``history`` (of ``history_bytes``, None when not known yet) with
    ``input_items``: a 400 naming ``param`` when together they are past ``bounds``, else
    the history's bytes. Costs one JSON encoding of what is not measured yet; every
    backend call costs more."""
    count = len(history) + len(input_items)
    if count > bounds.max_items:
        raise ConversationTooLarge(bounds, count, 0).api_error(_what(param, name), param)
    if history_bytes is None:
        history_bytes = items_bytes(history)
    size = history_bytes + items_bytes(input_items)
    if size > bounds.max_bytes:
        raise ConversationTooLarge(bounds, count, size).api_error(_what(param, name), param)
    return history_bytes


def bytes_after(history_bytes: int | None, *added: Sequence[Item]) -> int | None:
    """The bytes of a history once ``added`` joins it (None while the history's are not
    known): what a turn's next state carries, so its follow-up measures only its input."""
    if history_bytes is None:
        return None
    return history_bytes + sum(items_bytes(items) for items in added)


def _what(param: str, name: str) -> str:
    if param == "conversation":
        return f"With your input, conversation {echo(name)}"
    return f"With your input, the conversation through {param} {echo(name)}"
