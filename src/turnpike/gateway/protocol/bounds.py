"""Cheap bounds on a request body, checked before anything expensive sees it. Pure: no I/O.

Each bound answers a hostile or broken client with a 400 naming the parameter, long
before a stage whose cost grows with the input (the tokenizer's regex, the safety
classifier, a gRPC message) is reached (docs/tenants-and-limits.md, "Bounds on input"):

- nesting: JSON deeper than ``MAX_JSON_DEPTH`` levels (no request of this API needs more);
- characters: the strings of a create request (``input``, ``instructions``, tools...)
  hold at most ``max_input_chars`` characters in all;
- model: a model name is at most ``MAX_MODEL_CHARS`` characters.

Each check has a fast path that costs one pass in C over the raw body or nothing, so a
normal request pays next to nothing for them.
"""

from __future__ import annotations

import json
from typing import Any

from turnpike.gateway.protocol.errors import invalid

# Deepest nesting a body may have: an input item's content part is 4 levels down, a
# tool's JSON Schema rarely 20; 64 leaves room for any real schema.
MAX_JSON_DEPTH = 64
# Longest model name (the router's ids are a few dozen characters).
MAX_MODEL_CHARS = 256


def _too_deep(param: str | None) -> Exception:
    return invalid(
        f"The JSON body of your request is nested deeper than {MAX_JSON_DEPTH} levels, the limit.",
        param,
        "json_too_deep",
    )


def check_depth(raw: bytes | str, body: Any) -> None:
    """Refuse ``body`` (parsed from ``raw``) when nested deeper than MAX_JSON_DEPTH.
    A body with fewer brackets than that cannot be, and is not walked."""
    if isinstance(raw, bytes):
        brackets = raw.count(b"[") + raw.count(b"{")
    else:
        brackets = raw.count("[") + raw.count("{")
    if brackets <= MAX_JSON_DEPTH:
        return
    # Iterative: the point is to never recurse as deep as the client nested.
    stack: list[tuple[Any, int, str | None]] = [(body, 1, None)]
    while stack:
        value, depth, top = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise _too_deep(top)
        if isinstance(value, dict):
            for key, child in value.items():
                if isinstance(child, dict | list):
                    stack.append((child, depth + 1, top if depth > 1 else key))
        elif isinstance(value, list):
            for child in value:
                if isinstance(child, dict | list):
                    stack.append((child, depth + 1, top))


def too_deep_for_parser() -> Exception:
    """What a body nested past the JSON parser's own limit gets (that parser stops
    before the body's structure is known, so no parameter is named)."""
    return _too_deep(None)


def surrogate_param(raw: bytes | str) -> str | None:
    """The parameter holding a lone surrogate (``"\\ud800"``), which the strict parser
    refused without saying where: the standard library's lenient parser finds it.
    Only called on a body already refused, so its cost is the error path's."""
    try:
        # surrogatepass: the body may carry one as raw UTF-8 bytes, not as an escape.
        text = raw.decode("utf-8", "surrogatepass") if isinstance(raw, bytes) else raw
        body = json.loads(text)
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[Any, str]] = [(body, "")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, str):
            if _has_surrogate(value):
                return path or None
        elif isinstance(value, dict):
            for key, child in value.items():
                child_path = f"{path}.{key}" if path else key
                if _has_surrogate(key):
                    return path or None
                stack.append((child, child_path))
        elif isinstance(value, list):
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(value))
    return None


def _has_surrogate(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_create(body: Any, raw_size: int, max_input_chars: int) -> None:
    """The bounds of a create request's body (``raw_size``: its size on the wire, which
    bounds its characters): the model name's length and the characters of its strings."""
    if not isinstance(body, dict):
        return  # the parser says what is wrong with it
    model = body.get("model")
    if isinstance(model, str) and len(model) > MAX_MODEL_CHARS:
        raise invalid(
            f"Invalid 'model': a model name is at most {MAX_MODEL_CHARS} characters.",
            "model",
            "invalid_value",
        )
    if raw_size <= max_input_chars:
        return  # a character is at least one byte
    sizes = {key: _chars(value) for key, value in body.items()}
    if sum(sizes.values()) > max_input_chars:
        largest = max(sizes, key=sizes.__getitem__)
        raise invalid(
            f"Your request holds more than {max_input_chars} characters of text, the "
            f"limit; '{largest}' alone holds {sizes[largest]}.",
            largest,
            "input_too_large",
        )


def _chars(value: Any) -> int:
    """Characters in every string of ``value`` (iterative: the depth is bounded, but
    recursion is not needed)."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += sum(len(k) for k in item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return total
