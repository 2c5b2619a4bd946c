"""Long text cut into pieces that encode to the same tokens, in bounded time. Pure.

Every encoding of client text with o200k goes through ``encode_in_pieces``: the
tokenizer's renders, and the worker simulator's answers (which quote the input).

o200k's encoder first splits text with a regex into "words", then merges each word's
bytes pair by pair. Both steps grow with the square of a word's length: 100,000 of one
letter take 13 s, 5 MB take minutes, and a long enough run overflows the native stack.

So long text is encoded in pieces of at most ``MAX_PIECE`` characters, cut only where
the o200k regex itself ends a word; the tokens are then exactly those of the whole text
(tests/unit/turnpike/test_token_pieces.py compares both on varied text). The cut points:

- before a space, tab, vertical tab or form feed that follows a non-space: no word that can
  reach it takes a space at its end (a space only ever starts one);
- before ASCII punctuation other than the apostrophe (which starts 's, 't...) that
  follows a letter or digit: letter and digit words never take punctuation at their end.

A run of ``MAX_PIECE`` characters with no such point (one "word" that long: a single
repeated character, a base64 blob of letters) is cut where the bound falls. Its tokens
may then differ from the whole run's, which could not have been encoded in reasonable
time anyway.
"""

from __future__ import annotations

import re
from collections.abc import Callable

# Longest piece encoded at once: a million characters of the worst case (one repeated
# character, one token each) then take under a second; normal text is as fast as whole.
MAX_PIECE = 128
# Cuts are looked for in the second half of each piece's room.
_MIN_PIECE = MAX_PIECE // 2

# A cut point is the position of the character this matches.
# Python's \S is never whitespace to o200k either; the whitespace cut is limited to the
# characters both count as whitespace.
_CUT = re.compile(r"(?<=\S)[ \t\x0b\x0c]|(?<=[^\W_])[!-&(-/:-@\[-`{-~]")


def pieces(text: str) -> list[str]:
    """``text`` in consecutive pieces of at most MAX_PIECE characters, cut where the
    o200k regex ends a word whenever it can be."""
    if len(text) <= MAX_PIECE:
        return [text]
    out: list[str] = []
    start, end = 0, len(text)
    while end - start > MAX_PIECE:
        cut = _CUT.search(text, start + _MIN_PIECE, start + MAX_PIECE)
        stop = cut.start() if cut is not None else start + MAX_PIECE
        out.append(text[start:stop])
        start = stop
    out.append(text[start:])
    return out


# Every whitespace character (what o200k's \s matches, as Python's str.isspace), made a
# space; the last of them is U+3000.
_SPACES = str.maketrans({c: " " for c in map(chr, range(0x3001)) if c.isspace()})


def has_long_run(text: str) -> bool:
    """Whether ``text`` has a run of MAX_PIECE non-whitespace or whitespace characters.
    Every o200k word lies within one such run (give or take the one character a word may
    start with), so text without one is safe to encode whole. Two passes in C: about a
    fifth of what cutting the text into pieces costs."""
    if max(map(len, text.split()), default=0) >= MAX_PIECE:
        return True
    return " " * MAX_PIECE in text.translate(_SPACES)


def encode_in_pieces(encode: Callable[[str], list[int]], text: str) -> list[int]:
    """``encode(text)``, in bounded time: text with a long run goes piece by piece, the
    rest (nearly all text) whole."""
    if len(text) <= MAX_PIECE or not has_long_run(text):
        return encode(text)
    tokens: list[int] = []
    for piece in pieces(text):
        tokens += encode(piece)
    return tokens


def longest_word(text: str) -> int:
    """The longest stretch of ``text`` with no cut point: an upper bound on its longest
    o200k word, which is what an encoder that takes the text whole pays for squared."""
    longest, last = 0, 0
    for match in _CUT.finditer(text):
        longest = max(longest, match.start() - last)
        last = match.start()
    return max(longest, len(text) - last)
