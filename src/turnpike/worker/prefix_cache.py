"""A worker's prefix KV cache, modelled at block granularity (no tensors, only keys).

The prompt is cut into fixed blocks of ``block_size`` tokens, each with a key that
identifies the whole prefix up to it (``block_keys``). A request's cached tokens are
the longest run of leading blocks present; only full blocks are cached.

Eviction is least-recently-used over blocks, bounded by ``capacity_tokens``. Blocks of
a prefix are touched from the deepest to the first, so a shared head (system prompt,
tools) is more recent than any branch that extends it and is evicted last: evicting
a head first would strand its descendants, which could never match again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from turnpike.worker.block_keys import BlockKeys

BLOCK_SIZE = 64


class PrefixCache:
    def __init__(self, capacity_tokens: int, block_size: int = BLOCK_SIZE) -> None:
        if block_size < 1 or capacity_tokens < 0:
            raise ValueError("block_size must be >= 1 and capacity_tokens >= 0")
        self.block_size = block_size
        self.capacity_blocks = capacity_tokens // block_size
        self._keys = BlockKeys(block_size)
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    @property
    def cached_tokens(self) -> int:
        """Tokens currently held (always a whole number of blocks)."""
        return len(self._blocks) * self.block_size

    def block_keys(self, tokens: Sequence[int], namespace: str = "") -> list[bytes]:
        """Chained keys of every full block of ``tokens``. ``namespace`` (the model)
        separates caches of different models that share a vocabulary."""
        return self._keys(tokens, namespace)

    def _leading_hits(self, keys: Sequence[bytes]) -> int:
        hit = 0
        for key in keys:
            if key not in self._blocks:
                break
            hit += 1
        return hit

    def match(self, keys: Sequence[bytes]) -> int:
        """Cached prefix length in tokens for a prompt's block keys; touches the hit."""
        hit = self._leading_hits(keys)
        for key in reversed(keys[:hit]):
            self._blocks.move_to_end(key)
        return hit * self.block_size

    def insert(self, keys: Sequence[bytes]) -> None:
        """Cache every block of a prompt (the most recent use), evicting the LRU blocks."""
        if self.capacity_blocks == 0:
            return
        # A prompt longer than the whole cache keeps its head, which is what can match.
        keys = keys[: self.capacity_blocks]
        for key in reversed(keys):
            self._blocks[key] = None
            self._blocks.move_to_end(key)
        while len(self._blocks) > self.capacity_blocks:
            self._blocks.popitem(last=False)

    def lookup_and_insert(self, tokens: Sequence[int], namespace: str = "") -> int:
        """What a request does: count its cached prefix, then cache its whole prompt."""
        keys = self.block_keys(tokens, namespace)
        hit = self._leading_hits(keys) * self.block_size
        self.insert(keys)  # touches every block, the hit included
        return hit
