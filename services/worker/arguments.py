"""Function-call arguments that are valid for a tool's JSON Schema (pure).

The simulator has no model, so it builds a plausible instance of the schema:
``const``/``enum``/``default`` first, then values by type, with strings drawn from
the user's words where the property name says what it wants (a ``city`` gets a
capitalised word of the request, a ``query`` the request itself). Handled: types
(incl. lists of types), ``$ref`` to local definitions, ``allOf`` (merged),
``anyOf`` (the first branch that is not ``null``), ``oneOf`` (the first branch whose
value fits no other branch), objects (all declared
properties, required ones first when ``maxProperties`` bites; never an undeclared
key when ``additionalProperties`` is false), arrays (``items``, ``prefixItems``,
``minItems``/``maxItems``, ``uniqueItems``), numeric bounds (incl. exclusive ones and
``multipleOf``), string lengths, common ``format`` values and ``pattern`` (a string
is generated from the regular expression when the natural value does not match).
``not``, ``if``/``then`` and dependencies are not interpreted.
"""

from __future__ import annotations

import copy
import hashlib
import math
import random
import re
import uuid
from typing import Any

try:  # the standard regex parser; private, so degrade gracefully if it moves
    from re import _parser as _re_parser
except ImportError:  # pragma: no cover
    _re_parser = None

MAX_DEPTH = 12
# Below this nesting depth only what the schema requires is generated, so recursive
# schemas (a tree whose nodes have optional children) end.
OPTIONAL_DEPTH = 3

STOPWORDS = frozenset(
    """a an the and or but if then else of in on at to for from by with about into over
    under is are was were be been being do does did have has had can could would should
    will shall may might must i me my we our you your he she it its they them their this
    that these those what which who whom whose when where why how please tell show give
    find get let make use need want like just also some any all more most very much many
    there here not no yes hi hello thanks thank ok okay so as than too up down out""".split()
)

_WORD = re.compile(r"[^\W\d_][\w'-]*")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_URL = re.compile(r"https?://[^\s\"'<>)]+")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
_PATH = re.compile(r"(?:[\w.-]*/[\w./-]+|[\w-]+\.[A-Za-z0-9]{1,5})(?![\w/])")
_BACKTICKS = re.compile(r"`([^`]+)`")

_FORMATS = {
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


def content_words(text: str) -> list[str]:
    """Distinct words of ``text`` that carry meaning, in order of appearance."""
    seen: dict[str, str] = {}
    for raw in _WORD.findall(text):
        word = re.sub(r"(n't|'s|'re|'ve|'ll|'d|'m)$", "", raw.strip("'-"), flags=re.IGNORECASE)
        key = word.lower()
        if len(key) >= 3 and key not in STOPWORDS and key not in seen:
            seen[key] = word
    return list(seen.values())


def stable_rng(*parts: object) -> random.Random:
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return random.Random(int.from_bytes(digest, "big"))


class ArgumentGenerator:
    def __init__(self, root: Any, user_text: str, rng: random.Random) -> None:
        self.root = root
        self.text = " ".join(user_text.split())
        self.rng = rng
        self.words = content_words(self.text)
        self.entities = self._entities()

    def generate(self) -> Any:
        schema = self.root if isinstance(self.root, dict) else {}
        if "type" not in schema and not _has_any(schema, "$ref", "allOf", "anyOf", "oneOf"):
            schema = {**schema, "type": "object"}  # function arguments are an object
        return self.value(schema, "", 0, 0)

    # -- schema plumbing -------------------------------------------------------------

    def _normalise(self, schema: Any, depth: int) -> dict | None:
        """Resolve refs and combinators into one plain schema; None for ``false``."""
        if schema is False:
            return None
        if not isinstance(schema, dict):
            return {}
        for _ in range(MAX_DEPTH):
            if "$ref" in schema:
                target = self._deref(schema["$ref"])
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = _merge(target if isinstance(target, dict) else {}, rest)
            elif "allOf" in schema:
                merged = {k: v for k, v in schema.items() if k != "allOf"}
                for part in schema["allOf"]:
                    merged = _merge(merged, self._normalise(part, depth + 1) or {})
                schema = merged
            elif "anyOf" in schema:
                branches = [b for b in schema["anyOf"] if b is not False]
                rest = {k: v for k, v in schema.items() if k != "anyOf"}
                if not branches:
                    return rest
                chosen = next((b for b in branches if not _is_null_schema(b)), branches[0])
                schema = _merge(rest, chosen if isinstance(chosen, dict) else {})
            else:
                return schema
        return schema

    def _deref(self, ref: str) -> Any:
        if not ref.startswith("#"):
            return {}
        node: Any = self.root
        for part in ref[1:].split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return {}
        return node

    # -- values ----------------------------------------------------------------------

    def value(
        self, raw: Any, name: str, depth: int, index: int, *, fractional: bool = False
    ) -> Any:
        schema = self._normalise(raw, depth)
        if schema is None:
            return None
        if "oneOf" in schema and depth <= MAX_DEPTH:
            return self._one_of(schema, name, depth, index)
        if "const" in schema:
            return copy.deepcopy(schema["const"])
        kind = _type_of(schema)
        if schema.get("enum"):
            return copy.deepcopy(self._enum(schema, kind, index))
        if "default" in schema and index == 0 and _matches_type(schema["default"], kind):
            return copy.deepcopy(schema["default"])
        if depth > MAX_DEPTH:
            return _shallow(kind)
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, name, depth)
        if kind == "integer":
            return self._number(schema, name, index, integer=True)
        if kind == "number":
            return self._number(schema, name, index, integer=False, fractional=fractional)
        if kind == "boolean":
            return index % 2 == 0
        if kind == "null":
            return None
        return self._string(schema, name, index)

    def _one_of(self, schema: dict, name: str, depth: int, index: int) -> Any:
        """A value for the first branch (``null`` last) that matches no other branch:
        ``oneOf`` fails when a value fits two of them (3 is a number AND an integer)."""
        rest = {k: v for k, v in schema.items() if k != "oneOf"}
        branches = [b for b in schema["oneOf"] if b is not False]
        if not branches:
            return self.value(rest, name, depth + 1, index)
        normalised = [self._normalise(b, depth + 1) or {} for b in branches]
        order = sorted(range(len(branches)), key=lambda i: _is_null_schema(normalised[i]))
        fallback: Any = None
        for n, i in enumerate(order):
            others = [o for j, o in enumerate(normalised) if j != i]
            merged = _merge(rest, branches[i] if isinstance(branches[i], dict) else {})
            avoid_integers = any(o.get("type") == "integer" for o in others)
            candidate = self.value(merged, name, depth + 1, index, fractional=avoid_integers)
            if not any(_roughly_matches(candidate, o) for o in others):
                return candidate
            if n == 0:
                fallback = candidate
        return fallback

    def _enum(self, schema: dict, kind: str | None, index: int) -> Any:
        options = [v for v in schema["enum"] if kind is None or _matches_type(v, kind)]
        options = options or list(schema["enum"])
        lowered = self.text.lower()
        mentioned = [v for v in options if isinstance(v, str) and v and v.lower() in lowered]
        if mentioned and index == 0:
            return mentioned[0]
        if schema.get("default") in options and index == 0:
            return schema["default"]
        return options[index % len(options)]

    def _object(self, schema: dict, depth: int) -> dict:
        props = schema.get("properties") or {}
        required = [k for k in schema.get("required", []) if isinstance(k, str)]
        extra = schema.get("additionalProperties", True)
        optional = [k for k in props if k not in required and props[k] is not False]
        if depth >= OPTIONAL_DEPTH:
            optional = []
        # Declared order, but when maxProperties cuts, required keys survive.
        keys = [k for k in props if k in required] + [k for k in required if k not in props]
        limit = schema.get("maxProperties")
        for key in optional:
            if limit is None or len(keys) < limit:
                keys.append(key)
        order = {k: i for i, k in enumerate(props)}
        keys.sort(key=lambda k: order.get(k, len(order)))
        result: dict[str, Any] = {}
        for key in keys:
            sub = props.get(key, extra if isinstance(extra, dict) else {})
            result[key] = self.value(sub, key, depth + 1, 0)
        minimum = schema.get("minProperties", 0)
        while len(result) < minimum and extra is not False:
            key = f"extra_{len(result) + 1}"
            result[key] = self.value(extra if isinstance(extra, dict) else {}, key, depth + 1, 0)
        return result

    def _array(self, schema: dict, name: str, depth: int) -> list:
        prefix = schema.get("prefixItems")
        items = schema.get("items", {})
        if isinstance(items, list):  # draft-04..2019 tuple form
            prefix, items = items, schema.get("additionalItems", {})
        prefix = prefix if isinstance(prefix, list) else []
        low = schema.get("minItems", 0)
        high = schema.get("maxItems")
        wanted = 1 if depth < OPTIONAL_DEPTH else 0
        count = max(low, wanted, min(len(prefix), 3) if wanted else 0)
        if high is not None:
            count = min(count, high)
        if items is False:
            count = min(count, len(prefix))
        singular = name[:-1] if name.endswith("s") else name
        result = []
        for i in range(count):
            sub = prefix[i] if i < len(prefix) else items
            result.append(self.value(sub, singular, depth + 1, i))
        return result

    def _number(
        self, schema: dict, name: str, index: int, *, integer: bool, fractional: bool = False
    ) -> int | float:
        wanted: float | None = None
        for found in _NUMBER.findall(self.text):
            number = float(found)
            if (not integer or number.is_integer()) and _in_bounds(schema, number):
                wanted = number
                break
        if wanted is None:
            by_name = [_INT_BY_NAME[w] for w in name_words(name) if w in _INT_BY_NAME]
            wanted = float(by_name[-1]) if by_name else (1.0 if integer else 1.5)
        wanted += index
        low, high = _bounds(schema, integer)
        step = schema.get("multipleOf")
        if isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0:
            return _tidy(_multiple(step, wanted, low, high, integer))
        value = min(max(wanted, low), high)
        if integer:
            return int(value)
        if fractional and float(value).is_integer():
            # Wanted as a number that is not an integer (see _one_of).
            for nudged in (value + 0.5, value - 0.5, (low + high) / 2):
                if low <= nudged <= high and not float(nudged).is_integer():
                    return nudged
        return _tidy(value)

    def _string(self, schema: dict, name: str, index: int) -> str:
        value = self._natural_string(schema, name, index)
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and not _search(pattern, value):
            generated = string_for_pattern(pattern)
            if generated is not None:
                value = generated
        low = schema.get("minLength", 0)
        high = schema.get("maxLength")
        fitted = value
        while len(fitted) < low:
            fitted += " " + (value or "x") if fitted else (value or "x")
        if high is not None and len(fitted) > high:
            fitted = fitted[:high].rstrip() if len(fitted[:high].rstrip()) >= low else fitted[:high]
        if isinstance(pattern, str) and not _search(pattern, fitted) and _search(pattern, value):
            return value  # a pattern is stricter than a length hint; keep the match
        return fitted

    def _natural_string(self, schema: dict, name: str, index: int) -> str:
        suffix = f" {index + 1}" if index else ""
        fmt = schema.get("format")
        words = name_words(name)
        if fmt == "uuid" or "uuid" in words:
            return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        if fmt in _FORMATS:
            finder = _FINDERS.get(fmt)
            match = finder.search(self.text) if finder else None
            return match.group(0) if match else _FORMATS[fmt]
        if {"url", "uri", "link", "href", "website"} & set(words):
            match = _URL.search(self.text)
            return match.group(0) if match else "https://example.com/"
        if "email" in words:
            match = _EMAIL.search(self.text)
            return match.group(0) if match else "user@example.com"
        if words and words[-1] == "id":
            return f"id_{self.rng.getrandbits(32):08x}"
        if {"date", "day"} & set(words):
            return _FORMATS["date"]
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

    def _entities(self) -> list[str]:
        """Capitalised phrases of the request (``New York``), minus leading stopwords.
        A capital that only starts a sentence ("Weather in Oslo") says little, so such
        phrases come after the others."""
        inner: list[str] = []
        initial: list[str] = []
        for sentence in re.split(r"(?<=[.!?])\s+", self.text):
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


def generate_arguments(schema: Any, user_text: str, rng: random.Random) -> Any:
    """A JSON value valid for ``schema`` (a decoded JSON Schema), built from ``user_text``."""
    return ArgumentGenerator(schema, user_text, rng).generate()


# -- helpers ---------------------------------------------------------------------------


def _strip_stopwords(words: list[str]) -> str:
    while words and words[0].lower() in STOPWORDS:
        words = words[1:]
    return " ".join(words)


def _tidy(number: float) -> int | float:
    """3.0 -> 3: what a model writes for a whole number."""
    return int(number) if float(number).is_integer() else number


def _roughly_matches(value: Any, schema: dict) -> bool:
    """Whether ``value`` may be valid for ``schema``, judged by its simple keywords
    (erring towards yes: a wrong yes only makes ``_one_of`` try another branch)."""
    if "const" in schema:
        return value == schema["const"]
    if schema.get("enum"):
        return value in schema["enum"]
    kinds = schema.get("type")
    if isinstance(kinds, str):
        kinds = [kinds]
    if isinstance(kinds, list) and not any(_matches_type(value, k) for k in kinds):
        return False
    if isinstance(value, dict):
        return all(key in value for key in schema.get("required", []))
    if isinstance(value, str):
        pattern = schema.get("pattern")
        return schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", math.inf) and (
            not isinstance(pattern, str) or _search(pattern, value)
        )
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _in_bounds(schema, value)
    return True


def _has_any(schema: dict, *keys: str) -> bool:
    return any(k in schema for k in keys)


def _is_null_schema(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "null"


def _merge(base: dict, extra: dict) -> dict:
    merged = dict(base)
    for key, value in extra.items():
        if key == "properties" and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        elif key == "required" and isinstance(merged.get(key), list):
            merged[key] = list(dict.fromkeys([*merged[key], *value]))
        elif key == "type" and key in merged:
            mine = merged[key] if isinstance(merged[key], list) else [merged[key]]
            theirs = value if isinstance(value, list) else [value]
            both = [t for t in theirs if t in mine or (t == "integer" and "number" in mine)]
            merged[key] = both[0] if both else value
        else:
            merged[key] = value
    return merged


def _type_of(schema: dict) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        concrete = [k for k in kind if k != "null"]
        return concrete[0] if concrete else ("null" if kind else None)
    if isinstance(kind, str):
        return kind
    if _has_any(schema, "properties", "required", "additionalProperties", "minProperties"):
        return "object"
    if _has_any(schema, "items", "prefixItems", "minItems", "maxItems"):
        return "array"
    if _has_any(schema, "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return "number"
    if _has_any(schema, "multipleOf"):
        return "number"
    if "enum" in schema or "const" in schema:
        return None
    return "string"


def _matches_type(value: Any, kind: str | None) -> bool:
    if kind is None:
        return True
    if kind == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    checks = {
        "object": dict,
        "array": list,
        "string": str,
        "boolean": bool,
        "number": (int, float),
    }
    if kind == "null":
        return value is None
    expected = checks.get(kind)
    if expected is None:
        return False
    if kind == "number" and isinstance(value, bool):
        return False
    return isinstance(value, expected)


def _shallow(kind: str | None) -> Any:
    return {"object": {}, "array": [], "integer": 0, "number": 0, "boolean": False}.get(
        kind or "", None if kind == "null" else ""
    )


def _bounds(schema: dict, integer: bool) -> tuple[float, float]:
    low, high = -math.inf, math.inf
    if isinstance(schema.get("minimum"), (int, float)):
        low = schema["minimum"]
    if isinstance(schema.get("maximum"), (int, float)):
        high = schema["maximum"]
    ex_low, ex_high = schema.get("exclusiveMinimum"), schema.get("exclusiveMaximum")
    if ex_low is True:  # draft-04: the boolean modifies minimum
        ex_low = low
    if ex_high is True:
        ex_high = high
    if isinstance(ex_low, (int, float)) and not isinstance(ex_low, bool):
        if integer:
            low = max(low, math.floor(ex_low) + 1)
        else:
            nudge = 0.5 if math.isinf(high) else min(0.5, (high - ex_low) / 2)
            low = max(low, ex_low + nudge)
    if isinstance(ex_high, (int, float)) and not isinstance(ex_high, bool):
        if integer:
            high = min(high, math.ceil(ex_high) - 1)
        else:
            nudge = 0.5 if math.isinf(low) else min(0.5, (ex_high - low) / 2)
            high = min(high, ex_high - nudge)
    if integer:
        low = math.ceil(low) if math.isfinite(low) else low
        high = math.floor(high) if math.isfinite(high) else high
    return low, high


def _in_bounds(schema: dict, number: float) -> bool:
    low, high = _bounds(schema, False)
    return low <= number <= high


def _multiple(step: float, wanted: float, low: float, high: float, integer: bool) -> int | float:
    """A multiple of ``step`` in [low, high] near ``wanted`` that float division accepts."""
    base = round(min(max(wanted, low), high) / step)
    for k in sorted(range(base - 50, base + 51), key=lambda k: (abs(k - base), k)):
        value = k * step
        if integer:
            if not float(value).is_integer():
                continue
            value = round(value)
        if low <= value <= high and (value / step) == int(value / step):
            return value
    return int(step) if integer else step


def _search(pattern: str, value: str) -> bool:
    try:
        return re.search(pattern, value) is not None
    except re.error:
        return True  # an unusable pattern cannot be honoured; do not fight it


def string_for_pattern(pattern: str) -> str | None:
    """A short string matching ``pattern`` (Python-compatible regex), or None."""
    if _re_parser is None:
        return None
    try:
        parsed = _re_parser.parse(pattern)
        out = _emit(list(parsed), {})
    except (re.error, RecursionError, ValueError, TypeError, KeyError):
        return None
    return out if _search(pattern, out) else None


_CATEGORY_CHAR = {
    "CATEGORY_DIGIT": "1",
    "CATEGORY_NOT_DIGIT": "a",
    "CATEGORY_WORD": "a",
    "CATEGORY_NOT_WORD": "-",
    "CATEGORY_SPACE": " ",
    "CATEGORY_NOT_SPACE": "a",
}


def _emit(nodes: list, groups: dict[int, str]) -> str:
    out = []
    for op, arg in nodes:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(arg))
        elif name == "NOT_LITERAL":
            out.append("a" if chr(arg) != "a" else "b")
        elif name == "ANY":
            out.append("a")
        elif name == "IN":
            out.append(_emit_set(arg))
        elif name == "CATEGORY":
            out.append(_CATEGORY_CHAR.get(str(arg), "a"))
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            low, high, sub = arg
            count = low if low > 0 else min(1, high)
            out.append("".join(_emit(list(sub), groups) for _ in range(count)))
        elif name == "SUBPATTERN":
            group, _add, _del, sub = arg
            text = _emit(list(sub), groups)
            if group is not None:
                groups[group] = text
            out.append(text)
        elif name == "ATOMIC_GROUP":
            out.append(_emit(list(arg), groups))
        elif name == "BRANCH":
            out.append(_emit(list(arg[1][0]), groups))
        elif name == "GROUPREF":
            out.append(groups.get(arg, ""))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue
        else:
            raise ValueError(f"unsupported regex construct {name}")
    return "".join(out)


def _emit_set(items: list) -> str:
    negate = items and str(items[0][0]) == "NEGATE"
    if not negate:
        op, arg = items[0]
        name = str(op)
        if name == "LITERAL":
            return chr(arg)
        if name == "RANGE":
            return chr(arg[0])
        if name == "CATEGORY":
            return _CATEGORY_CHAR.get(str(arg), "a")
        raise ValueError(f"unsupported set member {name}")
    pattern = re.compile("[" + "^" + _set_source(items[1:]) + "]")
    for candidate in "aA1_- xZ9.":
        if pattern.fullmatch(candidate):
            return candidate
    raise ValueError("no character for negated set")


def _set_source(items: list) -> str:
    parts = []
    for op, arg in items:
        name = str(op)
        if name == "LITERAL":
            parts.append(re.escape(chr(arg)))
        elif name == "RANGE":
            parts.append(f"{re.escape(chr(arg[0]))}-{re.escape(chr(arg[1]))}")
        elif name == "CATEGORY":
            parts.append(
                {
                    "CATEGORY_DIGIT": r"\d",
                    "CATEGORY_NOT_DIGIT": r"\D",
                    "CATEGORY_WORD": r"\w",
                    "CATEGORY_NOT_WORD": r"\W",
                    "CATEGORY_SPACE": r"\s",
                    "CATEGORY_NOT_SPACE": r"\S",
                }[str(arg)]
            )
    return "".join(parts)
