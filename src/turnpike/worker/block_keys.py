"""The keys of a prompt's blocks, as the prefix cache stores them, hashed once per block.

The prompt is cut into fixed blocks of ``block_size`` tokens. Each block's key hashes
the previous block's key with its own tokens, so one key identifies the whole prefix
up to that block (as in paged-attention prefix caching); the first block chains from
the hash of the ``namespace`` (the model). Only full blocks have keys.

A conversation's next prompt repeats its previous prompt and adds the new turn, so
most of its blocks were hashed a turn ago. The keys of recent prompts are remembered
with their tokens: a prompt that starts with a remembered one (the exact tokens of its
full blocks) takes that prompt's keys and hashes only the blocks after them. The keys
are the same either way; only the work differs.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence

REMEMBERED_PROMPTS = 64  # about one per conversation in flight on a worker


class BlockKeys:
    def __init__(self, block_size: int, remembered: int = REMEMBERED_PROMPTS) -> None:
        if block_size < 1 or remembered < 0:
            raise ValueError("block_size must be >= 1 and remembered >= 0")
        self.block_size = block_size
        self.remembered = remembered
        # (namespace, key of the last block) -> (the tokens of those blocks, their keys)
        self._recent: OrderedDict[tuple[str, bytes], tuple[bytes, tuple[bytes, ...]]] = (
            OrderedDict()
        )

    def __call__(self, tokens: Sequence[int], namespace: str = "") -> list[bytes]:
        """Chained keys of every full block of ``tokens``."""
        raw = array("I", tokens)
        step = self.block_size * raw.itemsize  # the bytes of one block's token ids
        data = raw.tobytes()
        data = data[: len(data) // step * step]  # the full blocks
        known, keys = self._longest_known(data, namespace)
        key = keys[-1] if keys else _root(namespace)
        for start in range(known, len(data), step):
            key = hashlib.blake2b(key + data[start : start + step], digest_size=16).digest()
            keys.append(key)
        self._remember(namespace, data, keys)
        return keys

    def _longest_known(self, data: bytes, namespace: str) -> tuple[int, list[bytes]]:
        """The longest remembered prompt that ``data`` starts with: its length in bytes and
        its keys. The one found is dropped: the prompt that extends it replaces it."""
        best: tuple[str, bytes] | None = None
        best_length = 0
        for name, (known, _) in self._recent.items():
            if name[0] == namespace and len(known) > best_length and data.startswith(known):
                best, best_length = name, len(known)
        if best is None:
            return 0, []
        _, keys = self._recent.pop(best)
        return best_length, list(keys)

    def _remember(self, namespace: str, data: bytes, keys: list[bytes]) -> None:
        if not keys or not self.remembered:
            return
        name = (namespace, keys[-1])
        self._recent[name] = (data, tuple(keys))
        self._recent.move_to_end(name)
        while len(self._recent) > self.remembered:
            self._recent.popitem(last=False)


def _root(namespace: str) -> bytes:
    return hashlib.blake2b(namespace.encode(), digest_size=16).digest()
