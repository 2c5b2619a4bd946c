"""The small fields of a create request: what ``CreateRequest`` keeps of each, and the
rules their schema cannot state. Pure: no I/O.

Each function takes the field as the create body's model validated it (None when absent)
and returns what ``CreateRequest`` keeps, or raises ``ApiError`` (400) naming the
parameter.
"""

from __future__ import annotations

from typing import Any

from turnpike.gateway.protocol.create_body import (
    MAX_CLIENT_METADATA_KEYS,
    UNSUPPORTED,
    CompactionOption,
    JsonObjectFormat,
    JsonSchemaFormat,
    PlainTextFormat,
    ReasoningOptions,
    TextOptions,
)
from turnpike.gateway.protocol.errors import invalid, invalid_type


def refuse_unsupported(body: dict[str, Any]) -> None:
    for key, message in UNSUPPORTED.items():
        if body.get(key) is not None:
            raise invalid(message, key, "unsupported_parameter")


def service_tier(tier: str | None) -> str:
    """The tier asked for. Turnpike has one tier: the response reports ``default``
    for ``auto`` (the tier actually used), and echoes any other as asked."""
    return "default" if tier in (None, "auto") else tier


def top_logprobs(count: int | None) -> int:
    """0 to 20, as the API; above 0 is refused: no backend here returns log probabilities,
    and a client asking for them must not get an answer without them."""
    if count:
        raise invalid(
            "Log probabilities are not supported by this server; leave 'top_logprobs' out or 0.",
            "top_logprobs",
            "unsupported_parameter",
        )
    return 0


def text(options: TextOptions | None) -> dict[str, Any]:
    """``text`` as the response echoes it: a format (every field of a JSON schema's
    present), and the verbosity when given."""
    fmt = options.format if options is not None else None
    out: dict[str, Any] = {"format": {"type": "text"} if fmt is None else _format(fmt)}
    if options is not None and options.verbosity is not None:
        out["verbosity"] = options.verbosity
    return out


def _format(fmt: PlainTextFormat | JsonObjectFormat | JsonSchemaFormat) -> dict[str, Any]:
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    return {
        "type": "json_schema",
        "name": fmt.name,
        "description": fmt.description,
        "schema": fmt.schema_,
        "strict": bool(fmt.strict),
    }


def reasoning(options: ReasoningOptions | None) -> dict[str, Any] | None:
    # The spec's Reasoning object needs both keys; fill what the client left out.
    if options is None:
        return None
    return {"effort": options.effort, "summary": options.summary}


def compact_threshold(options: list[CompactionOption] | None) -> int | None:
    """``context_management: [{"type": "compaction", "compact_threshold": N}]``: the
    last N given."""
    thresholds = [o.compact_threshold for o in options or () if o.compact_threshold is not None]
    return thresholds[-1] if thresholds else None


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
