"""A custom (freeform) tool call's input (pure, deterministic given the seed): text
that the tool's ``format`` accepts, made from the user's words.

- ``text`` (or no format): the command the request quotes (a fenced block, a span in
  backticks, "run ..."), else its meaningful words.
- ``grammar`` with ``regex`` syntax: a string the pattern matches in full
  (``regex_sample``), checked with a time-bounded full match (a tenant's pattern may
  backtrack without end).
- ``grammar`` with ``lark`` syntax: a sentence of the grammar. A walk from ``start``
  expands each rule by one of its alternatives with the smallest derivation (so it
  always ends; the seeded rng picks among equals), string terminals as written, regex
  terminals by ``regex_sample``; then the grammar's parser checks the sentence
  (``lark_grammar``). The Codex CLI's apply_patch grammar (recognised by its literals)
  gets a patch that adds a file instead (``patch_input``): one Codex can apply.

A few seeds are tried; then ValueError, which the caller reports as the model's error,
as it does for a definition over 64 KiB, a grammar lark refuses, or one whose smallest
sentence needs more than ``MAX_STEPS`` derivation steps (``start: a`` / ``a: "x" a``
has none).
"""

from __future__ import annotations

import math
import re

from turnpike.worker.lark_grammar import Alternative, LarkGrammar, load_lark_grammar
from turnpike.worker.patch_input import add_file_patch, looks_like_apply_patch
from turnpike.worker.regex_sample import RegexSampler, fullmatch_within
from turnpike.worker.seeded import stable_rng
from turnpike.worker.user_text import UserText, content_words, find_command

MAX_DEFINITION_BYTES = 64 * 1024
MAX_STEPS = 10_000  # rules and terminals in one derivation
MAX_INPUT_CHARS = 16 * 1024
ATTEMPTS = 4
MAX_TEXT_WORDS = 12
MAX_USER_CHARS = 8000  # the request's words are read from its start
MAX_PIECES = 300


def custom_tool_input(
    format_type: str, syntax: str, definition: str, user_text: str, seed: int
) -> str:
    """The input of a call to a custom tool whose format is ``format_type`` (``text``,
    ``grammar`` or empty) with ``syntax`` (``lark``, ``regex``) and ``definition``."""
    user_text = user_text[:MAX_USER_CHARS]
    if format_type in ("", "text"):
        return text_input(user_text)
    if format_type != "grammar":
        raise ValueError(f"unsupported custom tool format {format_type!r}")
    size = len(definition.encode())
    if size > MAX_DEFINITION_BYTES:
        raise ValueError(
            f"the tool's grammar definition is {size} bytes, over the limit of "
            f"{MAX_DEFINITION_BYTES}"
        )
    if syntax == "lark":
        return lark_input(definition, user_text, seed)
    if syntax == "regex":
        return regex_input(definition, user_text, seed)
    raise ValueError(f"unsupported grammar syntax {syntax!r}: expected lark or regex")


def text_input(user_text: str) -> str:
    command = find_command(user_text)
    if command:
        return command
    words = content_words(user_text)
    if words:
        return " ".join(words[:MAX_TEXT_WORDS])
    return " ".join(user_text.split())[:200] or "hello"


def regex_input(pattern: str, user_text: str, seed: int) -> str:
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as error:
        raise ValueError(f"invalid regex grammar: {error}") from error
    for attempt in range(ATTEMPTS):
        text = _sampler(user_text, seed, attempt).sample(pattern)
        if fullmatch_within(pattern, text):
            return text
    raise ValueError("could not write an input that the tool's regex matches in full")


def lark_input(definition: str, user_text: str, seed: int) -> str:
    grammar = load_lark_grammar(definition)
    if looks_like_apply_patch(definition):
        patch = add_file_patch(user_text)
        if grammar.parses(patch):
            return patch
    smallest = grammar.cost["start"]
    if smallest == math.inf:
        raise ValueError("the tool's grammar has no finite sentence: start never stops recursing")
    if smallest > MAX_STEPS:
        raise ValueError(
            f"the tool's grammar's shortest sentence takes {smallest:.0f} derivation steps, "
            f"over the budget of {MAX_STEPS}"
        )
    for attempt in range(ATTEMPTS):
        sampler = _sampler(user_text, seed, attempt)
        tokens = _derive(grammar, sampler)
        for separator in _separators(grammar):
            text = separator.join(token for token in tokens if token)
            if grammar.parses(text):
                return text
    raise ValueError("could not write an input that parses under the tool's lark grammar")


def _derive(grammar: LarkGrammar, sampler: RegexSampler) -> list[str]:
    """The terminals' texts of one smallest derivation from ``start``."""
    tokens: list[str] = []
    stack = [("start", False)]
    length = 0
    for _ in range(MAX_STEPS):
        if not stack:
            return tokens
        name, is_terminal = stack.pop()
        if is_terminal:
            token = _terminal_text(grammar, name, sampler)
            tokens.append(token)
            length += len(token) + 1
            if length > MAX_INPUT_CHARS:
                raise ValueError(f"the tool's grammar's sentence is over {MAX_INPUT_CHARS} chars")
            continue
        alternatives = grammar.rules[name]
        smallest = min(grammar.alternative_cost(a) for a in alternatives)
        shortest = [a for a in alternatives if grammar.alternative_cost(a) == smallest]
        chosen = sampler.rng.choice(_mentioned(grammar, shortest, sampler) or shortest)
        stack.extend((str(s.name), s.is_term) for s in reversed(chosen))
    raise ValueError(f"the tool's grammar's derivation did not finish in {MAX_STEPS} steps")


def _mentioned(
    grammar: LarkGrammar, alternatives: list[Alternative], sampler: RegexSampler
) -> list[Alternative]:
    """The alternatives with a word the request has (``"hi" | "hello"``: the one it wrote)."""
    return [
        alternative
        for alternative in alternatives
        if any(
            symbol.is_term
            and (literal := grammar.terminals[str(symbol.name)].literal) is not None
            and sampler.mentions(literal)
            for symbol in alternative
        )
    ]


def _terminal_text(grammar: LarkGrammar, name: str, sampler: RegexSampler) -> str:
    terminal = grammar.terminals[name]
    if terminal.literal is not None:
        return terminal.literal
    assert terminal.regex is not None
    text = sampler.sample(terminal.regex)
    if terminal.nullable and text:
        # The checking parser knows only its non-empty matches (lark_grammar).
        if terminal.nonempty is None or not re.fullmatch(terminal.nonempty, text):
            return ""
    return text


def _separators(grammar: LarkGrammar) -> list[str]:
    """Between tokens: a space where the grammar ignores one (``%ignore WS``: it reads
    as a person writes), else nothing."""
    for name in grammar.ignored:
        terminal = grammar.terminals[name]
        pattern = re.escape(terminal.literal) if terminal.literal is not None else terminal.regex
        if pattern and re.fullmatch(pattern, " "):
            return [" ", ""]
    return [""]


def _sampler(user_text: str, seed: int, attempt: int) -> RegexSampler:
    """A sampler over the request's pieces, best first; later attempts shuffle them."""
    rng = stable_rng(seed, "custom-input", user_text, attempt)
    pieces = UserText(user_text, rng).pieces[:MAX_PIECES]
    if attempt:
        rng.shuffle(pieces)
    return RegexSampler(pieces, rng, user_text)
