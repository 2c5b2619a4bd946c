"""The sprint's in-process cache of rendered tokens, per gateway process and bounded:
a miss only costs the full render it would have saved, never a wrong answer."""

from __future__ import annotations

from collections import OrderedDict

from turnpike.gateway.metrics import CacheLookups
from turnpike.gateway.state.conversation_state import RenderedPrefix

LOOKUPS = CacheLookups("token")


class TokenCache:
    """(tenant, response id or content key) -> the tokens a prompt was rendered to;
    least recently used first out once ``max_tokens`` are held."""

    def __init__(self, max_tokens: int) -> None:
        self._max = max_tokens
        self._held = 0
        self._entries: OrderedDict[tuple[str, str], RenderedPrefix] = OrderedDict()
        # A render kept under two keys (its response id and its content) is held once.
        self._keys_of: dict[int, int] = {}  # id(tokens) -> how many entries share them

    def get(self, tenant: str, response_id: str) -> RenderedPrefix | None:
        entry = self._touch((tenant, response_id))
        LOOKUPS.count(entry)
        return entry

    def longest(self, tenant: str, keys: list[str]) -> RenderedPrefix | None:
        """The entry of the last of ``keys`` that is held (keys of ever longer prefixes);
        one lookup, whatever the number of keys."""
        entry = None
        for key in reversed(keys):
            if (entry := self._touch((tenant, key))) is not None:
                break
        LOOKUPS.count(entry)
        return entry

    def _touch(self, key: tuple[str, str]) -> RenderedPrefix | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def put(self, tenant: str, response_id: str, rendered: RenderedPrefix) -> None:
        key = (tenant, response_id)
        old = self._entries.pop(key, None)
        if old is not None:
            self._release(old)
        self._entries[key] = rendered
        shared = self._keys_of.get(id(rendered.tokens), 0)
        self._keys_of[id(rendered.tokens)] = shared + 1
        if not shared:
            self._held += len(rendered.tokens)
        while self._held > self._max and self._entries:
            _, evicted = self._entries.popitem(last=False)
            self._release(evicted)

    def _release(self, rendered: RenderedPrefix) -> None:
        shared = self._keys_of.pop(id(rendered.tokens)) - 1
        if shared:
            self._keys_of[id(rendered.tokens)] = shared
        else:
            self._held -= len(rendered.tokens)

    @property
    def held_tokens(self) -> int:
        return self._held
