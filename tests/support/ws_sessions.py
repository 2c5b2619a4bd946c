"""Settings of a WebSocket protocol core (``WsSession``) for tests: small bounds, so that
a test reaches each limit in a few frames; a test overrides what it is about."""

from __future__ import annotations

from typing import Any

SESSION_DEFAULTS: dict[str, Any] = {
    "default_model": "m",
    "max_frame_bytes": 10_000,
    "max_active": 2,
    "max_queued": 4,
    "max_lanes": 2,
    "cache_size": 8,
    "lifetime_s": 60.0,
    "now": 1000.0,
}


def session_settings(**overrides: Any) -> dict[str, Any]:
    return {**SESSION_DEFAULTS, **overrides}
