"""What the user's words offer a simulated answer (pure): the words that carry meaning,
the names in them, and a plausible value for a property, by its name and format.

The simulator has no model; a tool's arguments still read as if one wrote them when
they come from the request: a ``city`` gets a capitalised phrase of it ("New York"),
a ``query`` the request itself, a ``url`` the link in it, a ``limit`` its number, a
``cmd`` the command it quotes. Without such a word, a typical value for the property's
name stands in ("Paris" for a city, 5 for a limit).

A command is, first, a fenced code block's body; else the first span in backticks; else
the words after "run" or "execute" that start a clause ("can you run uname -a?"), up to
the end of the sentence, when they do not start with a common English word ("run the
tests" names no command). ``named_value`` reads the value a request gives a property by
its name ("workdir /tmp", "timeout_ms=5000", "3 days").
"""

from __future__ import annotations

import functools
import random
import re
import uuid
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

STOPWORDS = frozenset(
    """a an the and or but if then else of in on at to for from by with about into over
    under is are was were be been being do does did have has had can could would should
    will shall may might must i me my we our you your he she it its they them their this
    that these those what which who whom whose when where why how please tell show give
    find get let make use need want like just also some any all more most very much many
    there here not no yes hi hello thanks thank ok okay so as than too up down out""".split()
)

_WORD = re.compile(r"[^\W\d_][\w'-]*")
_CONTRACTION = re.compile(r"(n't|'s|'re|'ve|'ll|'d|'m)$", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_URL = re.compile(r"https?://[^\s\"'<>)]+")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
_PATH = re.compile(r"(?:[\w.-]*/[\w./-]+|[\w-]+\.[A-Za-z0-9]{1,5})(?![\w/])")
_BACKTICKS = re.compile(r"`([^`]+)`")
_FENCED = re.compile(r"```(?:[\w+-]*[ \t]*\n)?(.*?)```", re.DOTALL)
# "run X" where "run" starts a clause: "Run ls", "can you run ls", "ok, run ls".
_RUN = re.compile(
    r"(?:^|[.!?,;:]\s+|\b(?:please|you|then|and|to|now|just)\s+)(?:run|execute)\s+"
    r"(?:(?:the|this)\s+)?(?:command\s+)?(.+?)(?:[.?!](?:\s|$)|$)",
    re.IGNORECASE,
)
# Words that end a quoted-by-"run" command: "run ls -la and tell me what is there".
_RUN_TAIL = re.compile(
    r"\s+(?:and\s+|then\s+)*(?:tell|show|summari[sz]e|report|explain|let|give|please)\b.*$",
    re.IGNORECASE,
)
# Between a property's name and its value: "workdir /tmp", "timeout_ms=5000", "mode: fast",
# "unit is celsius", "limit to 5".
_AFTER_NAME = r"(?:\s*[:=]\s*|\s+(?:(?:is|to|of|at|set\s+to)\s+)?)"
_VALUE_TOKEN = r"(?:`([^`]+)`|\"([^\"]*)\"|'([^']*)'|([^\s,;]+))"
_GIVEN_AFTER = re.compile(_AFTER_NAME + _VALUE_TOKEN)
_NUMBER_BEFORE = re.compile(r"(?<![\w.])(-?\d+(?:\.\d+)?)\s*$")
_NEGATED = re.compile(r"\b(?:no|not|without|disable)\s*$", re.IGNORECASE)
MAX_NAMINGS = 16  # the places a property's name is looked at for its value
VALUE_WINDOW = 1000  # characters after a name its value may span (a quoted command)
MAX_COMMAND_CHARS = 500  # longer "run ..." text is prose, not a command
_BOOLEANS = {"true": True, "yes": True, "on": True, "false": False, "no": False, "off": False}

# A typical value per JSON Schema ``format``, when the request offers none.
FORMAT_EXAMPLES = {
    "date": "2025-01-15",
    "date-time": "2025-01-15T09:30:00Z",
    "time": "09:30:00Z",
    "email": "user@example.com",
    "idn-email": "user@example.com",
    "uri": "https://example.com/",
    "url": "https://example.com/",
    "iri": "https://example.com/",
    "uri-reference": "https://example.com/",
    "hostname": "example.com",
    "idn-hostname": "example.com",
    "ipv4": "192.0.2.1",
    "ipv6": "2001:db8::1",
    "duration": "P1D",
}

_FINDERS = {
    "email": _EMAIL,
    "idn-email": _EMAIL,
    "uri": _URL,
    "url": _URL,
    "iri": _URL,
    "uri-reference": _URL,
}

# Property-name words -> what kind of string a model would put there.
_ENTITY_WORDS = {
    "city": "Paris",
    "town": "Paris",
    "location": "Paris",
    "place": "Paris",
    "destination": "Paris",
    "origin": "London",
    "country": "France",
    "region": "Europe",
    "state": "California",
    "name": "Alex",
    "person": "Alex",
    "author": "Alex",
    "user": "alex",
    "username": "alex",
    "company": "Acme",
    "organization": "Acme",
    "team": "Platform",
    "title": "Untitled",
}
_TEXT_WORDS = frozenset(
    """query q search text prompt question message content input body description topic
    keywords terms instructions task request summary comment note step explanation reason
    justification goal""".split()
)
_PATH_WORDS = frozenset("path file filename filepath dir directory folder".split())
COMMAND_WORDS = frozenset("command cmd shell script code expression".split())
_INT_BY_NAME = {
    "limit": 5,
    "count": 5,
    "n": 5,
    "k": 5,
    "num": 5,
    "max": 5,
    "results": 5,
    "size": 10,
    "page": 1,
    "year": 2025,
    "month": 1,
    "day": 15,
    "age": 30,
    "days": 3,
    "hours": 1,
    "minutes": 30,
    "seconds": 30,
    "timeout": 30,
    "ms": 1000,
}


def fenced_block(raw: str) -> str | None:
    """The body of the first fenced code block of ``raw`` (its language tag left out), as
    written, or None when there is none or it is blank."""
    fenced = _FENCED.search(raw) if "```" in raw else None
    return fenced.group(1) if fenced and fenced.group(1).strip() else None


def find_command(raw: str) -> str | None:
    """The command ``raw`` (a request's text) quotes: a fenced block's body, else the
    first span in backticks, else the words after a clause-opening "run" (see the
    module's docstring); None when there is none."""
    fenced = fenced_block(raw)
    if fenced is not None:
        return fenced.strip()
    text = " ".join(raw.split())
    quoted = _BACKTICKS.search(text)
    if quoted and quoted.group(1).strip():
        return quoted.group(1).strip()
    lowered = text.lower()
    if "run" not in lowered and "execute" not in lowered:
        return None
    for match in _RUN.finditer(text):
        command = _RUN_TAIL.sub("", match.group(1)).strip().strip("\"'")
        first = command.split(" ", 1)[0].lower() if command else ""
        if first and first not in STOPWORDS and len(command) <= MAX_COMMAND_CHARS:
            return command
    return None


def name_words(name: str) -> list[str]:
    """``maxResults`` / ``max_results`` / ``max-results`` -> ``["max", "results"]``."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return [w.lower() for w in re.split(r"[\W_]+", spaced) if w]


# Longer "words" (a run of one letter, a base64 blob) carry no meaning to quote, and
# quoting one would make the answer as long as the input.
MAX_WORD_CHARS = 40


def content_words(text: str) -> list[str]:
    """Distinct words of ``text`` that carry meaning, in order of appearance."""
    seen: dict[str, str] = {}
    for raw in _WORD.findall(text):
        word = _CONTRACTION.sub("", raw.strip("'-"))
        key = word.lower()
        if 3 <= len(key) <= MAX_WORD_CHARS and key not in STOPWORDS and key not in seen:
            seen[key] = word
    return list(seen.values())


def capitalised_phrases(text: str) -> list[str]:
    """Capitalised phrases of ``text`` (``New York``), minus leading stopwords. A capital
    that only starts a sentence ("Weather in Oslo") says little, so such phrases come
    after the others."""
    inner: list[str] = []
    initial: list[str] = []
    for sentence in re.split(r"(?<=[.!?])\s+", text):
        group: list[re.Match[str]] = []
        starts_sentence = False
        for i, match in enumerate([*_WORD.finditer(sentence), None]):
            word = match.group(0) if match else ""
            adjacent = (
                bool(group)
                and match is not None
                and (sentence[group[-1].end() : match.start()].isspace())
            )
            if group and not (word[:1].isupper() and adjacent):
                phrase = _strip_stopwords([m.group(0) for m in group])
                stripped = phrase != " ".join(m.group(0) for m in group)
                if phrase:
                    (initial if starts_sentence and not stripped else inner).append(phrase)
                group = []
            if word[:1].isupper():
                assert match is not None  # word is empty without one
                if not group:
                    starts_sentence = i == 0
                group.append(match)
    return list(dict.fromkeys(inner + initial))


class UserText:
    """The request's words, read once, asked for one property's value at a time.
    ``index`` is the value's position in an array (later items differ)."""

    def __init__(self, text: str, rng: random.Random) -> None:
        self.raw = text
        self.text = " ".join(text.split())
        self.rng = rng  # for ids and uuids, which the words cannot supply
        self.words = content_words(self.text)
        self.entities = capitalised_phrases(self.text)

    def string_for(self, name: str, fmt: Any, index: int) -> str:
        suffix = f" {index + 1}" if index else ""
        words = name_words(name)
        if fmt == "uuid" or "uuid" in words:
            return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        if fmt in FORMAT_EXAMPLES:
            finder = _FINDERS.get(fmt)
            match = finder.search(self.text) if finder else None
            return match.group(0) if match else FORMAT_EXAMPLES[fmt]
        if {"url", "uri", "link", "href", "website"} & set(words):
            match = _URL.search(self.text)
            return match.group(0) if match else "https://example.com/"
        if "email" in words:
            match = _EMAIL.search(self.text)
            return match.group(0) if match else "user@example.com"
        if words and words[-1] == "id":
            return f"id_{self.rng.getrandbits(32):08x}"
        if {"date", "day"} & set(words):
            return FORMAT_EXAMPLES["date"]
        if {"lang", "language", "locale"} & set(words):
            return "en"
        if COMMAND_WORDS & set(words):
            return self.command or "ls -la"
        if _PATH_WORDS & set(words):
            match = _PATH.search(self.text)
            return match.group(0) if match else "README.md"
        entity = next((w for w in reversed(words) if w in _ENTITY_WORDS), None)
        if entity is not None:
            if self.entities:
                return self.entities[index % len(self.entities)]
            return _ENTITY_WORDS[entity] + suffix
        if _TEXT_WORDS & set(words):
            return (self.text[:200] or "hello") + suffix
        if self.words:
            return self.words[index % len(self.words)] + (
                suffix if index >= len(self.words) else ""
            )
        return (words[-1] if words else "value") + suffix

    def number_for(self, name: str, *, integer: bool, fits: Callable[[float], bool]) -> float:
        """The request's first number that ``fits``, else a typical (whole) one for
        ``name``: a model writes 30, not 30.0 or 1.5, unless told otherwise."""
        for found in _NUMBER.findall(self.text):
            number = float(found)
            if (not integer or number.is_integer()) and fits(number):
                return number
        by_name = [_INT_BY_NAME[w] for w in name_words(name) if w in _INT_BY_NAME]
        return float(by_name[-1]) if by_name else 1.0

    @cached_property
    def command(self) -> str | None:
        """The command the request quotes (see the module's docstring), if any."""
        return find_command(self.raw)

    def named_value(self, name: str, kind: str | None) -> Any:
        """The value the request gives the property ``name`` by naming it, as JSON of
        ``kind``: the token after the name ("workdir /tmp", "timeout_ms=5000", a quoted
        or backticked span), or for a number the one before it ("3 days"); for a boolean,
        the name alone is ``true`` ("with tty"; "no tty" is ``false``). ``NOT_GIVEN``
        when the name is not in the request or nothing after it fits ``kind``."""
        named = _name_pattern(name)
        if named is None:
            return NOT_GIVEN
        for n, match in enumerate(named.finditer(self.text)):
            if n == MAX_NAMINGS:
                break
            # Bounded: a long request that names a property many times stays linear.
            after = _GIVEN_AFTER.match(self.text[match.end() : match.end() + VALUE_WINDOW])
            before_text = self.text[max(0, match.start() - 40) : match.start()]
            token = None
            if after is not None:
                token = next(g for g in after.groups() if g is not None)
                if after.group(4) is not None:  # bare: sentence punctuation is not part of it
                    token = token.rstrip(".!?)")
            value = _as_kind(token, kind)
            if value is NOT_GIVEN and kind in ("integer", "number"):
                before = _NUMBER_BEFORE.search(before_text)
                value = _as_kind(before.group(1), kind) if before else NOT_GIVEN
            if value is NOT_GIVEN and kind == "boolean":
                negated = _NEGATED.search(before_text)
                value = not negated
            if value is not NOT_GIVEN:
                return value
        return NOT_GIVEN

    def names(self, name: str) -> bool:
        """Whether the request names the property ``name`` (as a word)."""
        named = _name_pattern(name)
        return named is not None and named.search(self.text) is not None

    def mentions_word(self, option: str) -> bool:
        """Whether ``option`` is in the request as a whole word ("eq" is not in "request")."""
        return (
            bool(option)
            and re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", self.text, re.IGNORECASE)
            is not None
        )

    def mentioned(self, options: Sequence[Any]) -> Any | None:
        """The first of ``options`` (strings) that the request mentions."""
        lowered = self.text.lower()
        return next((v for v in options if isinstance(v, str) and v and v.lower() in lowered), None)

    @cached_property
    def pieces(self) -> list[str]:
        """Every string of the request a pattern might want, most specific first: quoted
        code, links, addresses, paths, numbers, names, words, bare tokens, the whole
        text; then the format examples."""
        found = [
            *([self.command] if self.command else []),
            *_BACKTICKS.findall(self.text),
            *_URL.findall(self.text),
            *_EMAIL.findall(self.text),
            *_PATH.findall(self.text),
            *_NUMBER.findall(self.text),
            *self.entities,
            *self.words,
            *(token.strip(".,;:!?()[]{}\"'") for token in self.text.split()),
            self.text,
            *FORMAT_EXAMPLES.values(),
        ]
        return [piece for piece in dict.fromkeys(found) if piece]


@functools.lru_cache(maxsize=1024)
def _name_pattern(name: str) -> re.Pattern[str] | None:
    """A property's name as the request may write it: ``max_results``, ``max-results``,
    ``maxResults``, ``max results`` (any case), as whole words."""
    words = name_words(name)
    if not words:
        return None
    spelled = r"[\s_-]*".join(re.escape(w) for w in words)
    return re.compile(rf"(?<![\w-]){spelled}(?![\w-])", re.IGNORECASE)


class _NotGiven:
    def __repr__(self) -> str:
        return "NOT_GIVEN"


NOT_GIVEN: Any = _NotGiven()


def _as_kind(token: str | None, kind: str | None) -> Any:
    """``token`` (a word of the request) as a JSON value of ``kind``, or ``NOT_GIVEN``."""
    if token is None or token == "":
        return NOT_GIVEN
    if kind in ("integer", "number"):
        if not _NUMBER.fullmatch(token):
            return NOT_GIVEN
        number = float(token)
        if number.is_integer():
            return int(number)
        return NOT_GIVEN if kind == "integer" else number
    if kind == "boolean":
        return _BOOLEANS.get(token.lower(), NOT_GIVEN)
    if kind in ("string", None):
        return NOT_GIVEN if token.lower() in STOPWORDS else token
    return NOT_GIVEN


def _strip_stopwords(words: list[str]) -> str:
    while words and words[0].lower() in STOPWORDS:
        words = words[1:]
    return " ".join(words)
