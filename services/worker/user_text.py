"""What the user's words offer a simulated answer (pure): the words that carry meaning,
the names in them, and a plausible value for a property, by its name and format.

The simulator has no model; a tool's arguments still read as if one wrote them when
they come from the request: a ``city`` gets a capitalised phrase of it ("New York"),
a ``query`` the request itself, a ``url`` the link in it, a ``limit`` its number.
Without such a word, a typical value for the property's name stands in ("Paris" for a
city, 5 for a limit).
"""

from __future__ import annotations

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
    keywords terms instructions task request summary comment note""".split()
)
_PATH_WORDS = frozenset("path file filename filepath dir directory folder".split())
_COMMAND_WORDS = frozenset("command cmd shell script code expression".split())
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
}


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
                if not group:
                    starts_sentence = i == 0
                group.append(match)
    return list(dict.fromkeys(inner + initial))


class UserText:
    """The request's words, read once, asked for one property's value at a time.
    ``index`` is the value's position in an array (later items differ)."""

    def __init__(self, text: str, rng: random.Random) -> None:
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
        if _COMMAND_WORDS & set(words):
            match = _BACKTICKS.search(self.text)
            return match.group(1) if match else "ls -la"
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
        """The request's first number that ``fits``, else a typical one for ``name``."""
        for found in _NUMBER.findall(self.text):
            number = float(found)
            if (not integer or number.is_integer()) and fits(number):
                return number
        by_name = [_INT_BY_NAME[w] for w in name_words(name) if w in _INT_BY_NAME]
        return float(by_name[-1]) if by_name else (1.0 if integer else 1.5)

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


def _strip_stopwords(words: list[str]) -> str:
    while words and words[0].lower() in STOPWORDS:
        words = words[1:]
    return " ".join(words)
