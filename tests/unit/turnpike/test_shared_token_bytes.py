"""Token ids on the wire: uint32, little-endian, four bytes a token."""

from array import array

import pytest

from turnpike import token_bytes


def test_round_trip_and_the_wire_layout() -> None:
    tokens = [0, 1, 200_000, 2**32 - 1]
    data = token_bytes.pack(tokens)
    assert data[:8] == b"\x00\x00\x00\x00\x01\x00\x00\x00"  # little-endian, whatever the host
    assert token_bytes.unpack(data) == array("I", tokens)
    assert token_bytes.count(data) == 4
    assert token_bytes.pack(array("I", tokens)) == data


def test_a_partial_token_is_refused() -> None:
    with pytest.raises(ValueError, match="fours"):
        token_bytes.unpack(b"\x01\x02\x03")
