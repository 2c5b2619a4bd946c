"""A regular expression for the non-empty strings another matches (pure): ``(.*)`` ->
``(?:.)+``, ``a?b*`` -> ``a(?:b)*|(?:b)+``.

Lark's Earley lexer refuses a terminal that can match the empty string, while grammars
written for OpenAI's engine use them (the Codex CLI's apply_patch has
``add_line: "+" /(.*)/ LF``). ``lark_grammar`` makes such a terminal optional and gives
it this pattern, so the grammar's language is unchanged.

Written from the stdlib's parse tree (``re._parser``) and rendered back to regex text.
Capture groups are rendered non-capturing (an alternative may repeat one), so a pattern
with a backreference has no rendering (None), nor has one whose empty match depends on
an assertion inside a group (``(?:\\b)?``): None means "treat the terminal as matching
only the empty string", which never accepts a string the pattern does not match.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from re import _constants as sre  # the parse tree's opcodes (private)
from re import _parser as sre_parse  # private: see the module docstring
from typing import Any

from turnpike.worker.regex_sample import CATEGORIES as _CATEGORIES
from turnpike.worker.regex_sample import REPEATS as _REPEATS
from turnpike.worker.regex_sample import ZERO_WIDTH as _ZERO_WIDTH

_ANCHORS = {
    sre.AT_BEGINNING: "^",
    sre.AT_BEGINNING_STRING: r"\A",
    sre.AT_END: "$",
    sre.AT_END_STRING: r"\Z",
    sre.AT_BOUNDARY: r"\b",
    sre.AT_NON_BOUNDARY: r"\B",
}
_FLAG_LETTERS = ((re.IGNORECASE, "i"), (re.MULTILINE, "m"), (re.DOTALL, "s"), (re.ASCII, "a"))


class _Unsupported(Exception):
    pass


def nonempty_regex(pattern: str) -> str | None:
    """A pattern for the non-empty matches of ``pattern`` (valid, as lark checked), or
    None (see the module's docstring)."""
    tree = sre_parse.parse(pattern)
    try:
        body = _nonempty(tree, tree.state)
    except _Unsupported:
        return None
    if body is None:
        return None
    rendered = _flag_prefix(tree.state.flags) + body
    if sre_parse.parse(rendered).getwidth()[0] < 1:  # a rendering bug must not reach lark
        return None
    return rendered


def render(items: Sequence[tuple]) -> str:
    """Regex text for a parse tree (capture groups as non-capturing ones)."""
    return "".join(_render_item(op, av) for op, av in items)


def _nonempty(items: Sequence[tuple], state: object) -> str | None:
    """Regex text for the non-empty matches of the sequence ``items``: for each item
    that can be the first to consume a character, the items before it matching empty,
    it non-empty, the rest as they are."""
    alternatives: list[str] = []
    before = ""  # anchors and lookarounds before the first consuming item still apply
    for k, (op, av) in enumerate(items):
        head = _nonempty_item(op, av, state)
        if head is not None:
            alternatives.append(before + head + render(items[k + 1 :]))
        if _min_width(op, av, state) > 0:
            break
        if op in _ZERO_WIDTH:
            before += _render_item(op, av)
        elif _has_assertion([(op, av)]):
            break  # whether it can match empty depends on where: not rendered
    if not alternatives:
        return None
    return alternatives[0] if len(alternatives) == 1 else "(?:" + "|".join(alternatives) + ")"


def _nonempty_item(op: object, av: Any, state: object) -> str | None:
    if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
        return _render_item(op, av)
    if op in _ZERO_WIDTH:
        return None
    if op is sre.BRANCH:
        kept = [text for alt in av[1] if (text := _nonempty(alt, state)) is not None]
        return "(?:" + "|".join(kept) + ")" if kept else None
    if op is sre.SUBPATTERN:
        _, add, remove, sub = av
        inner = _nonempty(sub, state)
        return None if inner is None else _group(add, remove, inner)
    if op in _REPEATS:
        low, high, sub = av
        if high == 0 or _has_assertion(sub):
            return None
        if sre_parse.SubPattern(state, list(sub)).getwidth()[0] > 0:
            inner = render(sub)
        else:  # empty repetitions add nothing: one to ``high`` non-empty ones
            inner = _nonempty(sub, state)
            if inner is None:
                return None
            low = 1
        return "(?:" + inner + ")" + _quantifier(max(low, 1), high, op)
    if op in (sre.GROUPREF, sre.GROUPREF_EXISTS):
        raise _Unsupported(op)
    return None  # an atomic group: rare, and not worth its own case


def _render_item(op: object, av: Any) -> str:
    if op is sre.LITERAL:
        return _char(av)
    if op is sre.NOT_LITERAL:
        return "[^" + _char(av) + "]"
    if op is sre.ANY:
        return "."
    if op is sre.IN:
        return "[" + "".join(_class_item(item_op, item_av) for item_op, item_av in av) + "]"
    if op is sre.AT:
        return _ANCHORS[av]
    if op is sre.BRANCH:
        return "(?:" + "|".join(render(alt) for alt in av[1]) + ")"
    if op is sre.SUBPATTERN:
        _, add, remove, sub = av
        return _group(add, remove, render(sub))
    if op in _REPEATS:
        low, high, sub = av
        return "(?:" + render(sub) + ")" + _quantifier(low, high, op)
    if op in (sre.ASSERT, sre.ASSERT_NOT):
        direction, sub = av
        opener = {True: "(?=", False: "(?!"}[op is sre.ASSERT]
        if direction < 0:
            opener = opener[:2] + "<" + opener[2:]
        return opener + render(sub) + ")"
    if op is sre.ATOMIC_GROUP:
        return "(?>" + render(av) + ")"
    raise _Unsupported(op)


def _class_item(op: object, av: Any) -> str:
    if op is sre.NEGATE:
        return "^"
    if op is sre.LITERAL:
        return _char(av)
    if op is sre.RANGE:
        return _char(av[0]) + "-" + _char(av[1])
    if op is sre.CATEGORY and av in _CATEGORIES:
        return _CATEGORIES[av]
    raise _Unsupported(op)


def _char(code: int) -> str:
    """A character as regex text: letters and digits as themselves, anything else
    escaped by its code (never special, in or out of a class)."""
    c = chr(code)
    if c.isascii() and (c.isalnum() or c == "_"):
        return c
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _group(add: int, remove: int, inner: str) -> str:
    added = "".join(letter for flag, letter in _FLAG_LETTERS if add & flag)
    removed = "".join(letter for flag, letter in _FLAG_LETTERS if remove & flag)
    if not added and not removed:
        return "(?:" + inner + ")"
    return "(?" + added + ("-" + removed if removed else "") + ":" + inner + ")"


def _flag_prefix(flags: int) -> str:
    letters = "".join(letter for flag, letter in _FLAG_LETTERS if flags & flag)
    return f"(?{letters})" if letters else ""


def _quantifier(low: int, high: int, op: object) -> str:
    upper = "" if high == sre.MAXREPEAT else str(high)
    suffix = {sre.MIN_REPEAT: "?", sre.POSSESSIVE_REPEAT: "+"}.get(op, "")
    return "{" + f"{low},{upper}" + "}" + suffix


def _min_width(op: object, av: Any, state: object) -> int:
    return sre_parse.SubPattern(state, [(op, av)]).getwidth()[0]


def _has_assertion(items: Sequence[tuple]) -> bool:
    for op, av in items:
        if op in _ZERO_WIDTH:
            return True
        if op is sre.BRANCH and any(_has_assertion(alt) for alt in av[1]):
            return True
        if op is sre.SUBPATTERN and _has_assertion(av[3]):
            return True
        if op in _REPEATS and _has_assertion(av[2]):
            return True
        if op is sre.ATOMIC_GROUP and _has_assertion(av):
            return True
    return False
