"""The simulator's randomness: the same for the same request and seed, in any process."""

from __future__ import annotations

import hashlib
import random


def stable_rng(*parts: object) -> random.Random:
    """A generator seeded by ``parts`` (``hash`` is salted per process; this is not)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))
