"""A short string that a regular expression matches in full (pure, deterministic given
the rng), taken from the user's words where the pattern allows.

First the request's own pieces (``user_text.UserText.pieces``: a quoted command, links,
paths, numbers, names, words) are tried whole: ``(yes|no)`` gets the one the user wrote,
a date pattern a date in the request. Otherwise the string is written from the
pattern's parse tree: a run of one character class (``.+``, ``[a-z]{3}``, ``\\d{2}``)
is a piece of the request that fits it (or its longest fitting prefix), else characters
of the request that the class allows; a literal is itself; an alternative the request
mentions is preferred, else the rng picks one; a repeat of anything larger is written
its minimum number of times; anchors and lookarounds write nothing. So a pattern whose
lookarounds forbid what was written gets a string it does not match: callers check
with ``re.fullmatch`` and try another rng.

The tree is the stdlib's (``re._parser``): private, but the only parser of Python's
regex syntax (the libraries that generate strings from a regex all use it too).
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Sequence
from re import _constants as sre  # the parse tree's opcodes (private)
from re import _parser as sre_parse  # private: see the module docstring
from typing import Any

import regex

MAX_CHARS = 4096  # one written string; a longer minimum (``a{100000}``) is refused
MAX_PIECE_CHARS = 200  # longer pieces are not tried whole: a user's regex may backtrack
# A tenant's pattern may backtrack without end on the wrong text ((a+)+b on "aaa...!"): it
# is matched with the `regex` package, which gives up after this long (TimeoutError).
MATCH_TIMEOUT_S = 0.05
# The parse tree's repeats, zero-width items and categories (regex_nonempty reads them too).
REPEATS = _REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)
_SINGLE = (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN)
ZERO_WIDTH = _ZERO_WIDTH = (sre.AT, sre.ASSERT, sre.ASSERT_NOT)
CATEGORIES = _CATEGORIES = {
    sre.CATEGORY_DIGIT: r"\d",
    sre.CATEGORY_NOT_DIGIT: r"\D",
    sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S",
    sre.CATEGORY_WORD: r"\w",
    sre.CATEGORY_NOT_WORD: r"\W",
}
# Characters written when the request has none that fit, most readable first.
_FALLBACK = string.ascii_lowercase + string.digits + string.ascii_uppercase + "_-. "
_FALLBACK += string.punctuation + "\t\n"

CharTest = Callable[[str], bool]


class RegexSampler:
    """Writes strings for patterns, from ``pieces`` (the request's strings, best first).
    One sampler serves one answer: a piece used once is passed over for the next run
    (``WORD WORD`` gets two different words) while another fits."""

    def __init__(self, pieces: Sequence[str], rng: random.Random, user_text: str) -> None:
        self.pieces = [p for p in dict.fromkeys(pieces) if p]
        self.rng = rng
        self.user_text = user_text
        self.used: set[str] = set()
        self.chars = "".join(dict.fromkeys("".join(self.pieces)))
        self.groups: dict[int, str] = {}
        self.length = 0

    def sample(self, pattern: str) -> str:
        """A string for ``pattern``, which usually matches it in full (see the module's
        docstring). Raises ValueError for a pattern that does not compile, or whose
        shortest string is over ``MAX_CHARS``."""
        try:
            re.compile(pattern)
            tree = sre_parse.parse(pattern)
        except (re.error, RecursionError, OverflowError) as error:
            raise ValueError(f"invalid regular expression {pattern[:80]!r}: {error}") from error
        whole = self._whole_piece(pattern)
        if whole is not None:
            return whole
        self.groups = {}
        self.length = 0
        return self._write(tree, tree.state.flags)

    def _whole_piece(self, pattern: str) -> str | None:
        fitting = []
        for piece in self.pieces:
            matched = len(piece) <= MAX_PIECE_CHARS and fullmatch_within(pattern, piece)
            if matched is None:
                break  # the pattern backtracks: write from it instead
            if matched:
                fitting.append(piece)
        return self._take(fitting)

    def _take(self, fitting: list[str]) -> str | None:
        chosen = next((p for p in fitting if p not in self.used), fitting[0] if fitting else None)
        if chosen is not None:
            self.used.add(chosen)
        return chosen

    def _write(self, items: Sequence[tuple], flags: int) -> str:
        out: list[str] = []
        for op, av in items:
            if op in _SINGLE:
                text = chr(av) if op is sre.LITERAL else self._char(_test(op, av, flags))
            elif op is sre.BRANCH:
                text = self._write(self._branch(av[1]), flags)
            elif op is sre.SUBPATTERN:
                group, add, remove, sub = av
                text = self._write(sub, (flags | add) & ~remove)
                if group is not None:
                    self.groups[group] = text
            elif op in _REPEATS:
                low, high, sub = av
                text = self._repeat(low, high, sub, flags)
            elif op is sre.ATOMIC_GROUP:
                text = self._write(av, flags)
            elif op is sre.GROUPREF:
                text = self.groups.get(av, "")
            elif op is sre.GROUPREF_EXISTS:
                group, yes, no = av
                chosen = yes if group in self.groups else no
                text = self._write(chosen, flags) if chosen is not None else ""
            elif op in _ZERO_WIDTH:
                continue
            else:
                raise ValueError(f"unsupported regular expression construct: {op}")
            out.append(text)
            self.length += len(text)
            if self.length > MAX_CHARS:
                raise ValueError(f"the pattern's shortest string is over {MAX_CHARS} characters")
        return "".join(out)

    def _branch(self, alternatives: list) -> Sequence[tuple]:
        """An alternative the request mentions as a word, else one the rng picks."""
        for alternative in alternatives:
            if all(op is sre.LITERAL for op, _ in alternative):
                if self.mentions("".join(chr(av) for _, av in alternative)):
                    return alternative
        return self.rng.choice(alternatives)

    def mentions(self, literal: str) -> bool:
        """Whether the request has ``literal`` (with a letter or digit) as a word."""
        return bool(re.search(r"\w", literal)) and (
            re.search(rf"(?<!\w){re.escape(literal)}(?!\w)", self.user_text, re.IGNORECASE)
            is not None
        )

    def _repeat(self, low: int, high: int, sub: Sequence[tuple], flags: int) -> str:
        if low > MAX_CHARS:
            raise ValueError(f"the pattern repeats something at least {low} times")
        high = min(high, MAX_CHARS)
        test = _single_char(sub, flags)
        if test is not None:
            return self._run(test, low, high)
        return "".join(self._write(sub, flags) for _ in range(low))

    def _run(self, test: CharTest, low: int, high: int) -> str:
        """``low`` to ``high`` characters that each pass ``test``: a piece of the request
        that fits whole, else the longest fitting prefix of one, else ``low`` of the
        request's characters that fit."""
        fits = [p for p in self.pieces if low <= len(p) <= high and all(map(test, p))]
        whole = self._take(fits)
        if whole is not None:
            return whole
        for piece in self.pieces:
            prefix = _fitting_prefix(piece, test, high)
            if prefix and len(prefix) >= low:
                return prefix
        if low == 0:
            return ""
        chars = [c for c in self.chars if test(c)] or [self._char(test)]
        return "".join(chars[i % len(chars)] for i in range(low))

    def _char(self, test: CharTest) -> str:
        found = next((c for c in self.chars if test(c)), None)
        found = found or next((c for c in _FALLBACK if test(c)), None)
        found = found or next((chr(i) for i in range(0x3000) if test(chr(i))), None)
        if found is None:
            raise ValueError("the pattern has a character class that no character fits")
        return found


def _fitting_prefix(piece: str, test: CharTest, high: int) -> str:
    end = 0
    while end < len(piece) and end < high and test(piece[end]):
        end += 1
    return piece[:end]


def _single_char(sub: Sequence[tuple], flags: int) -> CharTest | None:
    """A test for the one character ``sub`` matches, when it matches exactly one
    (``.``, ``[a-z]``, ``(?:[A-Z]|[a-z])``, a literal); else None."""
    if len(sub) != 1:
        return None
    op, av = sub[0]
    if op in _SINGLE:
        return _test(op, av, flags)
    if op is sre.SUBPATTERN and av[0] is None:
        return _single_char(av[3], (flags | av[1]) & ~av[2])
    if op is sre.BRANCH:
        tests = [_single_char(alternative, flags) for alternative in av[1]]
        if all(t is not None for t in tests):
            return lambda c: any(t(c) for t in tests)  # type: ignore[misc]
    return None


def _test(op: object, av: Any, flags: int) -> CharTest:
    """Whether a character matches one single-character item, under ``flags``."""
    if op is sre.ANY:
        return (lambda c: True) if flags & re.DOTALL else (lambda c: c != "\n")
    negated = op is sre.NOT_LITERAL
    items = [(sre.LITERAL, av)] if op in (sre.LITERAL, sre.NOT_LITERAL) else list(av)
    if items and items[0][0] is sre.NEGATE:
        negated, items = True, items[1:]
    ascii_only = flags & re.ASCII

    def matches(c: str) -> bool:
        variants = {c, c.lower(), c.upper()} if flags & re.IGNORECASE else {c}
        return any(_in_items(v, items, ascii_only) for v in variants)

    return (lambda c: not matches(c)) if negated else matches


def _in_items(c: str, items: list, ascii_only: int) -> bool:
    code = ord(c)
    for op, av in items:
        if op is sre.LITERAL and code == av:
            return True
        if op is sre.RANGE and av[0] <= code <= av[1]:
            return True
        if op is sre.CATEGORY and re.fullmatch(_CATEGORIES.get(av, "(?!)"), c, ascii_only):
            return True
    return False


def fullmatch_within(pattern: str, text: str) -> bool | None:
    """Whether ``pattern`` matches all of ``text``; None when it could not tell within
    ``MATCH_TIMEOUT_S`` (or the `regex` package reads the pattern otherwise than re)."""
    try:
        return regex.fullmatch(pattern, text, timeout=MATCH_TIMEOUT_S) is not None
    except (TimeoutError, regex.error):
        return None
