"""A function call's arguments: a JSON value valid for the tool's JSON Schema, with its
values taken from the user's words (pure, deterministic given the rng).

The value is built, not searched for: ``const``/``enum``/``default`` first, then a
value by type, strings and numbers asked of ``user_text.UserText``. Handled: types
(incl. lists of types), ``$ref`` to local definitions, ``allOf`` (merged), ``anyOf``
(the first branch that is not ``null``), ``oneOf`` (the first branch whose value fits
no other branch), objects (below), arrays (``items``, ``prefixItems``,
``minItems``/``maxItems``, ``uniqueItems``), numeric bounds (incl. exclusive ones and
``multipleOf``), string lengths and common ``format`` values. ``not``, ``if``/``then``
and dependencies are not interpreted.

Which properties: a function call's arguments hold the ``required`` properties, and an
optional one only when the request gives it a value, as a model leaves out what it was
not asked for (an invented ``workdir`` is a folder that does not exist). The request
gives a value when it names the property followed by a value of its type ("workdir
/tmp", "timeout_ms=5000", "limit to 5", a number before the name: "3 days"; a boolean's
name alone means true: "with tty"), when it mentions one of an ``enum``'s values as a
word ("in fahrenheit"), or, for an object or array, names it. Structured outputs
(``all_properties``) hold every declared property: the answer is a document the caller
wants filled. Required keys come first when ``maxProperties`` bites; never an undeclared
key when ``additionalProperties`` is false.

Numbers are whole unless the schema or the request says otherwise: ``integer`` always;
``number`` too (clients such as the Codex CLI parse a millisecond count as an unsigned
integer), unless its ``multipleOf`` is fractional, its bounds hold no integer, or the
request's words give a fractional value. A string whose ``description`` lists its values
("One of: pending, in_progress, completed") is treated as that ``enum``.

``pattern`` is honoured by choice, not synthesis: when the natural string does not
match, the first piece of the request that does (a number, a name, a quoted command, a
token; then a ``format`` example) is used; when none does, the natural string stays
and the arguments do not match the pattern. No string was synthesised from the
regular expression: that needed the stdlib's private ``re._parser``, and the libraries
on PyPI that do it (Hypothesis' ``from_regex``, exrex, rstr, xeger, sre-yield) all parse
with that same private module, so none removes the dependency.

Why not hypothesis-jsonschema: it is a property-testing strategy, so a value is drawn
by running Hypothesis' test engine (there is no public seeded draw), 8 to 160 ms a call
on these tests' schemas against well under 1 ms here, and this runs on every function
call the simulator makes. Its values are arbitrary (an empty ``city``, random Unicode),
never the user's words; it rejects recursive ``$ref``s; and its last release (0.23.1,
February 2024) uses Hypothesis internals that current Hypothesis no longer has (it fails
on a plain object schema).
"""

from __future__ import annotations

import copy
import random
import re
from typing import Any

from turnpike.worker.schema_keywords import (
    bounds,
    has_any,
    in_bounds,
    is_null_schema,
    matches_type,
    merge,
    roughly_matches,
    search,
    type_of,
)
from turnpike.worker.user_text import NOT_GIVEN, UserText

MAX_DEPTH = 12
# Below this nesting depth only what the schema requires is generated, so recursive
# schemas (a tree whose nodes have optional children) end.
OPTIONAL_DEPTH = 3
# "One of: pending, in_progress, completed" in a string's description: its values.
_LISTED_VALUES = re.compile(
    r"\bone of\s*:?\s*((?:[`\"']?[\w.-]+[`\"']?)(?:\s*(?:,|\bor\b|\|)\s*(?:or\s+)?"
    r"[`\"']?[\w.-]+[`\"']?)+)",
    re.IGNORECASE,
)
# Something to build, not a value the request gave (an optional object or array named).
_BUILD: Any = object()


def generate_arguments(
    schema: Any, user_text: str, rng: random.Random, *, all_properties: bool = False
) -> Any:
    """A JSON value valid for ``schema`` (a decoded JSON Schema), built from ``user_text``:
    required properties, and optional ones the request gives (every declared one with
    ``all_properties``, for structured outputs)."""
    return SchemaInstance(schema, UserText(user_text, rng), all_properties).generate()


class SchemaInstance:
    def __init__(self, root: Any, words: UserText, all_properties: bool = False) -> None:
        self.root = root
        self.words = words
        self.all_properties = all_properties

    def generate(self) -> Any:
        schema = self.root if isinstance(self.root, dict) else {}
        if "type" not in schema and not has_any(schema, "$ref", "allOf", "anyOf", "oneOf"):
            schema = {**schema, "type": "object"}  # function arguments are an object
        return self.value(schema, "", 0, 0)

    # -- schema plumbing -------------------------------------------------------------

    def _normalise(self, schema: object, depth: int) -> dict[str, Any] | None:
        """Resolve refs and combinators into one plain schema; None for ``false``."""
        if schema is False:
            return None
        if not isinstance(schema, dict):
            return {}
        for _ in range(MAX_DEPTH):
            if "$ref" in schema:
                target = self._deref(schema["$ref"])
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = merge(target if isinstance(target, dict) else {}, rest)
            elif "allOf" in schema:
                merged = {k: v for k, v in schema.items() if k != "allOf"}
                for part in schema["allOf"]:
                    merged = merge(merged, self._normalise(part, depth + 1) or {})
                schema = merged
            elif "anyOf" in schema:
                branches = [b for b in schema["anyOf"] if b is not False]
                rest = {k: v for k, v in schema.items() if k != "anyOf"}
                if not branches:
                    return rest
                chosen = next((b for b in branches if not is_null_schema(b)), branches[0])
                schema = merge(rest, chosen if isinstance(chosen, dict) else {})
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
        kind = type_of(schema)
        if kind == "string" and not schema.get("enum"):
            listed = _listed_values(schema.get("description"))
            if listed:
                schema = {**schema, "enum": listed}
        if schema.get("enum"):
            return copy.deepcopy(self._enum(schema, kind, index))
        if "default" in schema and index == 0 and matches_type(schema["default"], kind):
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

    def _one_of(self, schema: dict[str, Any], name: str, depth: int, index: int) -> Any:
        """A value for the first branch (``null`` last) that matches no other branch:
        ``oneOf`` fails when a value fits two of them (3 is a number AND an integer)."""
        rest = {k: v for k, v in schema.items() if k != "oneOf"}
        branches = [b for b in schema["oneOf"] if b is not False]
        if not branches:
            return self.value(rest, name, depth + 1, index)
        normalised = [self._normalise(b, depth + 1) or {} for b in branches]
        order = sorted(range(len(branches)), key=lambda i: is_null_schema(normalised[i]))
        fallback: Any = None
        for n, i in enumerate(order):
            others = [o for j, o in enumerate(normalised) if j != i]
            merged = merge(rest, branches[i] if isinstance(branches[i], dict) else {})
            avoid_integers = any(o.get("type") == "integer" for o in others)
            candidate = self.value(merged, name, depth + 1, index, fractional=avoid_integers)
            if not any(roughly_matches(candidate, o) for o in others):
                return candidate
            if n == 0:
                fallback = candidate
        return fallback

    def _enum(self, schema: dict[str, Any], kind: str | None, index: int) -> Any:
        options = [v for v in schema["enum"] if kind is None or matches_type(v, kind)]
        options = options or list(schema["enum"])
        if index == 0:
            mentioned = self.words.mentioned(options)
            if mentioned is not None:
                return mentioned
            if schema.get("default") in options:
                return schema["default"]
        return options[index % len(options)]

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        props = schema.get("properties") or {}
        required = [k for k in schema.get("required", []) if isinstance(k, str)]
        extra = schema.get("additionalProperties", True)
        optional = [k for k in props if k not in required and props[k] is not False]
        if depth >= OPTIONAL_DEPTH:
            optional = []
        given: dict[str, Any] = {}
        if not self.all_properties:
            for key in optional:
                value = self._given(props[key], key, depth + 1)
                if value is not NOT_GIVEN:
                    given[key] = value
            optional = [k for k in optional if k in given]
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
            if given.get(key, _BUILD) is not _BUILD:
                result[key] = given[key]
            else:
                result[key] = self.value(sub, key, depth + 1, 0)
        minimum = schema.get("minProperties", 0)
        while len(result) < minimum and extra is not False:
            key = f"extra_{len(result) + 1}"
            result[key] = self.value(extra if isinstance(extra, dict) else {}, key, depth + 1, 0)
        return result

    def _given(self, raw: Any, name: str, depth: int) -> Any:
        """The value the request gives the optional property ``name`` (see the module's
        docstring): a value, ``_BUILD`` (named; build it), or ``NOT_GIVEN``."""
        schema = self._normalise(raw, depth)
        if schema is None or "oneOf" in schema:
            return NOT_GIVEN
        kind = type_of(schema)
        options = schema.get("enum") or (
            _listed_values(schema.get("description")) if kind == "string" else None
        )
        if "const" in schema:
            return _BUILD if self.words.names(name) else NOT_GIVEN
        if options:
            said = [v for v in options if isinstance(v, str) and self.words.mentions_word(v)]
            return copy.deepcopy(said[0]) if said else NOT_GIVEN
        if kind in ("object", "array"):
            return _BUILD if self.words.names(name) else NOT_GIVEN
        value = self.words.named_value(name, kind)
        if value is NOT_GIVEN or not roughly_matches(value, schema):
            return NOT_GIVEN
        if kind == "string" and isinstance(schema.get("pattern"), str):
            return value if search(schema["pattern"], value) else NOT_GIVEN
        return value

    def _array(self, schema: dict[str, Any], name: str, depth: int) -> list[Any]:
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
        self,
        schema: dict[str, Any],
        name: str,
        index: int,
        *,
        integer: bool,
        fractional: bool = False,
    ) -> int | float:
        wanted = self.words.number_for(name, integer=integer, fits=lambda n: in_bounds(schema, n))
        wanted += index
        step: Any = schema.get("multipleOf")  # a number when has_step
        has_step = isinstance(step, (int, float)) and not isinstance(step, bool) and step > 0
        if not integer and not fractional and float(wanted).is_integer():
            # A whole number where one fits: the request gave none with a fraction.
            whole_low, whole_high = bounds(schema, True)
            if whole_low <= whole_high and not (has_step and not float(step).is_integer()):
                integer = True
        low, high = bounds(schema, integer)
        if has_step:
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

    def _string(self, schema: dict[str, Any], name: str, index: int) -> str:
        value = self.words.string_for(name, schema.get("format"), index)
        pattern = schema.get("pattern")
        if isinstance(pattern, str) and not search(pattern, value):
            value = next((p for p in self.words.pieces if search(pattern, p)), value)
        low = schema.get("minLength", 0)
        high = schema.get("maxLength")
        fitted = value
        while len(fitted) < low:
            fitted += " " + (value or "x") if fitted else (value or "x")
        if high is not None and len(fitted) > high:
            fitted = fitted[:high].rstrip() if len(fitted[:high].rstrip()) >= low else fitted[:high]
        if isinstance(pattern, str) and not search(pattern, fitted) and search(pattern, value):
            return value  # a pattern is stricter than a length hint; keep the match
        return fitted


def _listed_values(description: Any) -> list[str]:
    """The values a description lists ("One of: a, b, c"), or none."""
    if not isinstance(description, str):
        return []
    match = _LISTED_VALUES.search(description)
    if match is None:
        return []
    parts = re.split(r"\s*(?:,|\bor\b|\|)\s*", match.group(1))
    return [p.strip("`\"' ") for p in parts if p.strip("`\"' ") and p.strip() != "or"]


def _tidy(number: float) -> int | float:
    """3.0 -> 3: what a model writes for a whole number."""
    return int(number) if float(number).is_integer() else number


def _shallow(kind: str | None) -> Any:
    return {"object": {}, "array": [], "integer": 0, "number": 0, "boolean": False}.get(
        kind or "", None if kind == "null" else ""
    )


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
