"""What every request came to: one structured access line (``turnpike.access``) and one
count (``turnpike_gateway_requests_total``), refusals included, so that an operator
sees a client that keeps failing. The HTTP edge records each request
(``app.EdgeMiddleware``); a WebSocket records its upgrade and each ``response.create``.

A line holds the request id, tenant, transport, route (the route's template, never
the raw path) or event type, status, error code and param, and duration. Never a key,
never content. ``TURNPIKE_ACCESS_LOG=false`` turns the lines off; the counts stay.
"""

from __future__ import annotations

import logging
import secrets
import time
from dataclasses import dataclass, field

from turnpike.gateway import metrics
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.json_codec import dumps

log = logging.getLogger("turnpike.access")

# The route of a path that matched none (bounded metric labels).
UNMATCHED = "unmatched"


@dataclass(slots=True)
class Access:
    request_id: str
    transport: str  # http, sse or websocket
    route: str  # a route's template, or a WebSocket event's type
    method: str = ""  # HTTP's; "" for a WebSocket event
    tenant: str = "-"  # "-" before (or without) a valid key
    status: int = 0
    code: str | None = None
    param: str | None = None
    started: float = field(default_factory=time.perf_counter)

    def failed(self, err: ApiError) -> None:
        self.status, self.code, self.param = err.status, err.code, err.param


def new_request_id() -> str:
    """The id of a request (its ``x-request-id``) or of a WebSocket event."""
    return "req_" + secrets.token_hex(12)


def record(access: Access, log_line: bool) -> None:
    """Count the request and, when ``log_line``, write its line."""
    metrics.REQUESTS.labels(
        access.route, access.transport, str(access.status), access.code or ""
    ).inc()
    if log_line:
        log.info(line(access, time.perf_counter()))


def line(access: Access, now: float) -> str:
    return dumps(
        {
            "request_id": access.request_id,
            "tenant": access.tenant,
            "transport": access.transport,
            "method": access.method or None,
            "route": access.route,
            "status": access.status,
            "code": access.code,
            "param": access.param,
            "duration_ms": round((now - access.started) * 1000, 3),
        }
    )
