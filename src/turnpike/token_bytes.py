"""Token ids on the wire as one block of bytes: unsigned 32-bit, little-endian, four
bytes a token. A prompt of 25,000 tokens is then one 100 KB copy on each side of a
call, where a repeated integer field costs a varint and a Python int per token."""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable

TOKEN_BYTES = 4
_NATIVE_LITTLE = sys.byteorder == "little"


def _tokens(values: Iterable[int] = ()) -> array:
    tokens = array("I", values)
    if tokens.itemsize != TOKEN_BYTES:  # no platform we run on, but say so if it ever is
        raise RuntimeError(f"array('I') holds {tokens.itemsize}-byte items here, not 4")
    return tokens


def pack(tokens: array | Iterable[int]) -> bytes:
    """Token ids as the wire carries them."""
    tokens = tokens if isinstance(tokens, array) and tokens.typecode == "I" else _tokens(tokens)
    if _NATIVE_LITTLE:
        return tokens.tobytes()
    swapped = array("I", tokens)
    swapped.byteswap()
    return swapped.tobytes()


def unpack(data: bytes) -> array:
    """The token ids of ``data`` (a multiple of four bytes), as array("I")."""
    if len(data) % TOKEN_BYTES:
        raise ValueError(f"token bytes must come in fours, not {len(data)}")
    tokens = _tokens()
    tokens.frombytes(data)
    if not _NATIVE_LITTLE:
        tokens.byteswap()
    return tokens


def count(data: bytes) -> int:
    """How many tokens ``data`` holds."""
    return len(data) // TOKEN_BYTES
