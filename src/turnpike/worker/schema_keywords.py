"""What one JSON Schema's simple keywords say (pure): its type, its numeric bounds,
whether a value roughly fits it, and two schemas merged into one. The generator in
``schema_instance`` builds on these."""

from __future__ import annotations

import math
import re
from typing import Any


def has_any(schema: dict, *keys: str) -> bool:
    return any(k in schema for k in keys)


def is_null_schema(schema: Any) -> bool:
    return isinstance(schema, dict) and schema.get("type") == "null"


def merge(base: dict, extra: dict) -> dict:
    """Both schemas' keywords; properties and required lists are joined, types narrowed."""
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


def type_of(schema: dict) -> str | None:
    """The type to generate: the first non-null one listed, else what the keywords imply;
    None when only ``enum``/``const`` say what is allowed."""
    kind = schema.get("type")
    if isinstance(kind, list):
        concrete = [k for k in kind if k != "null"]
        return concrete[0] if concrete else ("null" if kind else None)
    if isinstance(kind, str):
        return kind
    if has_any(schema, "properties", "required", "additionalProperties", "minProperties"):
        return "object"
    if has_any(schema, "items", "prefixItems", "minItems", "maxItems"):
        return "array"
    if has_any(schema, "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return "number"
    if has_any(schema, "multipleOf"):
        return "number"
    if "enum" in schema or "const" in schema:
        return None
    return "string"


def matches_type(value: Any, kind: str | None) -> bool:
    if kind is None:
        return True
    if kind == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    checks: dict[str, type | tuple[type, ...]] = {
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


def bounds(schema: dict, integer: bool) -> tuple[float, float]:
    """The closed range of allowed numbers (exclusive bounds nudged inside)."""
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


def in_bounds(schema: dict, number: float) -> bool:
    low, high = bounds(schema, False)
    return low <= number <= high


def search(pattern: str, value: str) -> bool:
    """Whether ``value`` satisfies the ``pattern`` keyword (unanchored, as JSON Schema)."""
    try:
        return re.search(pattern, value) is not None
    except re.error:
        return True  # an unusable pattern cannot be honoured; do not fight it


def roughly_matches(value: Any, schema: dict) -> bool:
    """Whether ``value`` may be valid for ``schema``, judged by its simple keywords
    (erring towards yes: a wrong yes only makes ``oneOf`` try another branch)."""
    if "const" in schema:
        return value == schema["const"]
    if schema.get("enum"):
        return value in schema["enum"]
    kinds = schema.get("type")
    if isinstance(kinds, str):
        kinds = [kinds]
    if isinstance(kinds, list) and not any(matches_type(value, k) for k in kinds):
        return False
    if isinstance(value, dict):
        return all(key in value for key in schema.get("required", []))
    if isinstance(value, str):
        pattern = schema.get("pattern")
        return schema.get("minLength", 0) <= len(value) <= schema.get("maxLength", math.inf) and (
            not isinstance(pattern, str) or search(pattern, value)
        )
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return in_bounds(schema, value)
    return True
