"""A custom tool's Lark grammar, loaded once (pure): its rules and terminals, the size
of each rule's smallest derivation, and a parser that checks a sentence.

Lark compiles the definition (EBNF ``+ * ? []``, aliases, templates, ``%import
common.WORD``) into plain rules over terminals. Its Earley lexer refuses a terminal that
can match the empty string, which grammars written for OpenAI's engine use (the Codex
CLI's apply_patch: ``add_line: "+" /(.*)/ LF``). So the checking parsers read the
compiled rules written out again, each such terminal made optional and given the
pattern of its non-empty matches (``regex_nonempty``): the same language. Terminal
patterns are set on lark's terminal objects (``edit_terminals``), not written into
grammar text, so no escaping stands between the definition and the check.

Checking is LALR(1) with lark's contextual lexer when the grammar is LALR(1) (the
apply_patch one is): a 100-line patch in about 10 ms, where Earley takes 150 ms. A
sentence LALR refuses (its lexer takes the longest match, so ``/.+/ "!"`` refuses
``a!``), or any sentence of a grammar that is not LALR(1), goes to Earley with the
``dynamic_complete`` lexer, which tries every length of a terminal's match.

``%import`` reads lark's own grammar modules (common, unicode); a relative import would
read a file of this machine, so it is refused. The caller bounds the definition's size.
"""

from __future__ import annotations

import functools
import heapq
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import lark
from lark.grammar import Symbol
from lark.lexer import PatternRE, PatternStr, TerminalDef

from turnpike.worker.regex_nonempty import nonempty_regex

_RELATIVE_IMPORT = re.compile(r"^\s*%import\s+\.", re.MULTILINE)
Alternative = tuple[Symbol, ...]


@dataclass(frozen=True)
class Terminal:
    name: str
    literal: str | None  # a string terminal's text
    regex: str | None  # a regex terminal's pattern, flags inline
    nullable: bool  # the regex matches ""
    nonempty: str | None  # then: the pattern of its non-empty matches (None: "" only)


@dataclass(frozen=True)
class LarkGrammar:
    rules: Mapping[str, tuple[Alternative, ...]]  # by rule name, its alternatives
    terminals: Mapping[str, Terminal]
    ignored: tuple[str, ...]  # %ignore'd terminals (may stand between any two)
    cost: Mapping[str, float]  # nodes of each rule's smallest derivation; inf: none
    checker: _Checker

    def alternative_cost(self, alternative: Alternative) -> float:
        return 1 + sum(1 if s.is_term else self.cost[s.name] for s in alternative)

    def parses(self, text: str) -> bool:
        return self.checker.parses(text)


class _Checker:
    """Lark's parsers for the grammar written out (see the module's docstring): LALR(1)
    when the grammar is, else Earley at once; with LALR, Earley only when first needed."""

    def __init__(self, grammar_text: str, patterns: Mapping[str, TerminalDef]) -> None:
        self.grammar_text = grammar_text
        self.patterns = patterns
        try:
            self.lalr: lark.Lark | None = self._parser("lalr", "contextual")
        except Exception:  # conflicts (not LALR(1)), or a lexer LALR's cannot build
            self.lalr = None
            _ = self.earley  # a grammar lark refuses fails here, at load

    @functools.cached_property
    def earley(self) -> lark.Lark:
        return self._parser("earley", "dynamic_complete")

    def parses(self, text: str) -> bool:
        if self.lalr is not None and _accepts(self.lalr, text):
            return True
        return _accepts(self.earley, text)

    def _parser(self, algorithm: str, lexer: str) -> lark.Lark:
        def assign(terminal: TerminalDef) -> None:
            chosen = self.patterns[terminal.name]
            terminal.pattern, terminal.priority = chosen.pattern, chosen.priority

        return lark.Lark(
            self.grammar_text,
            start="start",
            parser=algorithm,
            lexer=lexer,
            edit_terminals=assign,
        )


def _accepts(parser: lark.Lark, text: str) -> bool:
    try:
        parser.parse(text)
    except (lark.exceptions.LarkError, RecursionError):
        return False
    return True


def load_lark_grammar(definition: str) -> LarkGrammar:
    """The grammar of ``definition`` (start rule ``start``); ValueError when lark
    refuses it or it has no start rule."""
    loaded = _load(definition)
    if isinstance(loaded, str):
        raise ValueError(loaded)
    return loaded


# The same tool definition arrives with every turn; a refused one is remembered too.
@functools.lru_cache(maxsize=16)
def _load(definition: str) -> LarkGrammar | str:
    if _RELATIVE_IMPORT.search(definition):
        return "invalid lark grammar: a relative %import reads a file; import lark's own modules"
    compiled: dict[str, TerminalDef] = {}

    def keep(terminal: TerminalDef) -> None:
        compiled[terminal.name] = TerminalDef(terminal.name, terminal.pattern, terminal.priority)
        if terminal.pattern.min_width == 0:  # lark's lexer refuses it; this one is not used
            terminal.pattern = PatternStr(terminal.name)

    try:
        # Lexer-only mode compiles the rules without building a parser.
        compiler = lark.Lark(definition, parser=None, lexer="basic", edit_terminals=keep)
    except Exception as error:  # a client's grammar fails in many ways
        return f"invalid lark grammar: {_describe(error)}"
    rules: dict[str, list[Alternative]] = {}
    for rule in compiler.rules:
        rules.setdefault(str(rule.origin.name), []).append(tuple(rule.expansion))
    if "start" not in rules:
        return "invalid lark grammar: it has no rule named start"
    used = {str(s.name) for alts in rules.values() for alt in alts for s in alt if s.is_term}
    used |= {str(name) for name in compiler.ignore_tokens}
    missing = sorted(used - set(compiled))
    if missing:
        return f"invalid lark grammar: terminals without a pattern (%declare): {missing}"
    terminals = {name: _terminal(compiled[name]) for name in sorted(used)}
    frozen = {name: tuple(alts) for name, alts in rules.items()}
    try:
        checker = _checker(frozen, terminals, compiled, tuple(compiler.ignore_tokens))
    except Exception as error:  # as above
        return f"invalid lark grammar: {_describe(error)}"
    return LarkGrammar(
        rules=frozen,
        terminals=terminals,
        ignored=tuple(compiler.ignore_tokens),
        cost=_costs(frozen),
        checker=checker,
    )


def _terminal(definition: TerminalDef) -> Terminal:
    pattern = definition.pattern
    if isinstance(pattern, PatternStr):
        return Terminal(definition.name, pattern.value, None, False, None)
    regex = pattern.to_regexp()
    nullable = pattern.min_width == 0
    nonempty = nonempty_regex(regex) if nullable else None
    return Terminal(definition.name, None, regex, nullable, nonempty)


def _checker(
    rules: Mapping[str, tuple[Alternative, ...]],
    terminals: Mapping[str, Terminal],
    compiled: Mapping[str, TerminalDef],
    ignored: tuple[str, ...],
) -> _Checker:
    """Parsers for the compiled rules, written out with plain names (compiled ones such
    as ``__start_plus_0`` are not valid in grammar text)."""
    rule_names = {name: "start" if name == "start" else f"r{i}" for i, name in enumerate(rules)}
    terminal_names = {name: f"T{i}" for i, name in enumerate(terminals)}
    patterns: dict[str, TerminalDef] = {}
    lines = []
    for name, terminal in terminals.items():
        written = terminal_names[name]
        original = compiled[name]
        if not terminal.nullable:
            patterns[written] = TerminalDef(written, original.pattern, original.priority)
        elif terminal.nonempty is not None:
            patterns[written] = TerminalDef(
                written, PatternRE(terminal.nonempty), original.priority
            )
        if written in patterns:  # a placeholder; ``edit_terminals`` sets the pattern
            lines.append(f'{written}: "{written}"')
    for name, alternatives in rules.items():
        written_alternatives = []
        for alternative in alternatives:
            symbols = []
            for symbol in alternative:
                if not symbol.is_term:
                    symbols.append(rule_names[symbol.name])
                elif terminal_names[symbol.name] in patterns:
                    optional = terminals[symbol.name].nullable
                    symbols.append(terminal_names[symbol.name] + ("?" if optional else ""))
                # else: a terminal that only matches "" is left out
            written_alternatives.append(" ".join(symbols))
        lines.append(f"{rule_names[name]}: " + " | ".join(written_alternatives))
    lines += [
        f"%ignore {terminal_names[name]}" for name in ignored if terminal_names[name] in patterns
    ]

    return _Checker("\n".join(lines) + "\n", patterns)


def _costs(rules: Mapping[str, tuple[Alternative, ...]]) -> dict[str, float]:
    """Nodes (rules and terminals) of each rule's smallest derivation, inf when it has
    none (``a: "x" a``). Knuth's generalisation of Dijkstra's algorithm: a rule's cost is
    final when it is the cheapest left, so a 64 KiB grammar costs one pass."""
    cost: dict[str, float] = {name: math.inf for name in rules}
    waiting: list[int] = []  # per alternative: its rule symbols not yet final
    users: dict[str, list[int]] = {name: [] for name in rules}
    flat: list[tuple[str, Alternative]] = []
    queue: list[tuple[float, str]] = []
    for name, alternatives in rules.items():
        for alternative in alternatives:
            index = len(flat)
            flat.append((name, alternative))
            needed = {s.name for s in alternative if not s.is_term}
            waiting.append(len(needed))
            for needed_name in needed:
                users[needed_name].append(index)
            if not needed:
                heapq.heappush(queue, (1 + len(alternative), name))
    final: set[str] = set()
    while queue:
        value, name = heapq.heappop(queue)
        if name in final:
            continue
        final.add(name)
        cost[name] = value
        for index in users[name]:
            waiting[index] -= 1
            if waiting[index] == 0:
                origin, alternative = flat[index]
                total = 1 + sum(1 if s.is_term else cost[s.name] for s in alternative)
                heapq.heappush(queue, (total, origin))
    return cost


def _describe(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:300]
