"""Bearer API keys mapped to tenants (``TURNPIKE_API_KEYS`` = "key:tenant,...")."""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Mapping

from gateway.errors import unauthorized


class ApiKeys:
    def __init__(self, keys: Iterable[tuple[str, str]]) -> None:
        """``keys``: (key, tenant) pairs, as ``turnpike.config.parse_api_keys`` reads them."""
        # Encoded once: every request compares its token with each of them.
        self._keys = [(key.encode(), tenant) for key, tenant in keys]

    def tenant_for(self, headers: Mapping[str, str]) -> str:
        """The caller's tenant, or an ApiError(401)."""
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
        presented = token.encode()
        for key, tenant in self._keys:
            # Constant-time comparison: key checks must not leak prefixes through timing.
            if hmac.compare_digest(key, presented):
                return tenant
        raise unauthorized(f"Incorrect API key provided: {redact(token)}.")


def redact(token: str) -> str:
    if len(token) <= 8:
        return "*" * len(token)
    return f"{token[:4]}{'*' * 8}{token[-4:]}"


__all__ = ["ApiKeys"]
