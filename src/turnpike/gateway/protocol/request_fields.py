"""The small fields of a create request: checked as the API checks them. Pure: no I/O.

Each function takes the raw value (None when absent) and returns what ``CreateRequest``
keeps, or raises ``ApiError`` (400) naming the parameter.
"""

from __future__ import annotations

from typing import Any

from turnpike.gateway.protocol.errors import invalid, invalid_type, typed_entries

# Fields of the API this server does not implement, and would answer differently
# without: a request that sets one is refused rather than answered as if it did not.
UNSUPPORTED = {
    "prompt": "Prompt templates are not supported by this server; send 'instructions' and 'input'.",
    "moderation": "Moderation configuration is not supported by this server.",
    "access_programs": "Access programs are not supported by this server.",
    "image": "Request-level image options are not supported by this server.",
}
SERVICE_TIERS = ("auto", "default", "flex", "priority")
CACHE_RETENTIONS = ("in_memory", "24h")
MAX_IDENTIFIER_CHARS = 64  # safety_identifier and prompt_cache_key, as the API


def refuse_unsupported(body: dict[str, Any]) -> None:
    for key, message in UNSUPPORTED.items():
        if body.get(key) is not None:
            raise invalid(message, key, "unsupported_parameter")


def _enum(raw: Any, key: str, allowed: tuple[str, ...]) -> str | None:
    if raw is None:
        return None
    if raw not in allowed:
        raise invalid(
            f"Invalid value for '{key}': expected one of {', '.join(allowed)}.",
            key,
            "invalid_value",
        )
    return raw


def service_tier(raw: Any) -> str:
    """The tier asked for. Turnpike has one tier: the response reports ``default``
    for ``auto`` (the tier actually used), and echoes any other as asked."""
    tier = _enum(raw, "service_tier", SERVICE_TIERS)
    return "default" if tier in (None, "auto") else tier


def prompt_cache_retention(raw: Any) -> str | None:
    return _enum(raw, "prompt_cache_retention", CACHE_RETENTIONS)


def identifier(raw: Any, key: str) -> str | None:
    """``safety_identifier`` or ``prompt_cache_key``: a string of at most 64 characters."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise invalid_type(key, "a string")
    if len(raw) > MAX_IDENTIFIER_CHARS:
        raise invalid(
            f"Invalid '{key}': string too long. Expected a string with maximum length "
            f"{MAX_IDENTIFIER_CHARS}, but got a string with length {len(raw)} instead.",
            key,
            "string_above_max_length",
        )
    return raw


def max_tool_calls(raw: Any) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise invalid_type("max_tool_calls", "an integer")
    if raw < 1:
        raise invalid(
            "Invalid 'max_tool_calls': integer below minimum value. "
            f"Expected a value >= 1, but got {raw} instead.",
            "max_tool_calls",
            "integer_below_min_value",
        )
    return raw


def allowed_tools(raw: Any, tool_names: set[str]) -> list[dict[str, str]]:
    """``tool_choice.tools`` of an ``allowed_tools`` choice: function and custom tools
    among the request's tools, by name."""
    if not isinstance(raw, list) or not raw:
        raise invalid_type("tool_choice.tools", "a non-empty array of function tools")
    out = []
    kinds = ("function", "custom")
    for param, entry in typed_entries(
        raw, "tool_choice.tools", kinds, "function and custom tools are"
    ):
        name = entry.get("name")
        if not isinstance(name, str):
            raise invalid_type(f"{param}.name", "a string")
        if name not in tool_names:
            raise invalid(
                f"Tool choice '{name}' is not among the given tools.",
                f"{param}.name",
                "invalid_value",
            )
        out.append({"type": entry["type"], "name": name})
    return out


def prompt_cache_options(raw: Any) -> None:
    """Accepted: cache breakpoints and lifetimes are hints, never change the answer."""
    if raw is not None and not isinstance(raw, dict):
        raise invalid_type("prompt_cache_options", "an object")


def top_logprobs(raw: Any) -> int:
    """0 to 20, as the API; above 0 is refused: no backend here returns log probabilities,
    and a client asking for them must not get an answer without them."""
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise invalid_type("top_logprobs", "an integer")
    if not 0 <= raw <= 20:
        raise invalid(
            f"Invalid 'top_logprobs': {raw} is out of range; expected an integer from 0 to 20.",
            "top_logprobs",
            "invalid_value",
        )
    if raw:
        raise invalid(
            "Log probabilities are not supported by this server; leave 'top_logprobs' out or 0.",
            "top_logprobs",
            "unsupported_parameter",
        )
    return 0


MAX_CLIENT_METADATA_KEYS = 64


def client_metadata(raw: Any) -> dict[str, str]:
    """``client_metadata``: string values a client attaches for itself (not in the public
    schema; Codex sends it, with the W3C trace context of the turn). Kept, not echoed."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(v, str) for v in raw.values()):
        raise invalid_type("client_metadata", "an object of string values")
    if len(raw) > MAX_CLIENT_METADATA_KEYS:
        raise invalid(
            f"'client_metadata' has more than {MAX_CLIENT_METADATA_KEYS} keys.",
            "client_metadata",
            "invalid_value",
        )
    return dict(raw)
