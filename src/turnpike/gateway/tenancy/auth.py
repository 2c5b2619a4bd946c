"""The caller's Bearer token, and the 401s (in the API's error shape) for a missing,
malformed or unknown key. Which tenant a key belongs to is turnpike.gateway.tenancy.tenants' business."""

from __future__ import annotations

from collections.abc import Mapping

from turnpike.gateway.protocol.errors import ApiError, unauthorized


def bearer_token(headers: Mapping[str, str]) -> str:
    """The token of ``Authorization: Bearer <token>``, or an ApiError(401)."""
    raw = headers.get("authorization")
    if not raw:
        raise unauthorized(
            "You didn't provide an API key. Pass it in the Authorization header "
            "as 'Bearer YOUR_KEY'."
        )
    scheme, _, token = raw.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise unauthorized("The Authorization header must be 'Bearer YOUR_KEY'.")
    return token


def unknown_key(token: str) -> ApiError:
    """The 401 for a token that is no tenant's key (named redacted, never in full)."""
    return unauthorized(f"Incorrect API key provided: {redact(token)}.")


def redact(token: str) -> str:
    if len(token) <= 8:
        return "*" * len(token)
    return f"{token[:4]}{'*' * 8}{token[-4:]}"


__all__ = ["bearer_token", "redact", "unknown_key"]
