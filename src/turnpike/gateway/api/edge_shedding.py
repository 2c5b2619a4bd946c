"""Overload shedding at the edge: while the process is full, a create is refused before
routing and before its body is read.

A refused create used to run the whole HTTP path first (routing, reading and parsing the
body, checking its bounds) only to raise at admission. In a burst, every one of those
refusals queued on the event loop behind the admitted responses' work, so on a busy
machine the 503 meant to be fast took over a second. Here the decision is the one
admission makes (``AdmissionControl.refusal``: full, or busy and the tenant over its fair
share), from the tenant the Authorization header names (a lookup in the key directory),
with the same 503 ``server_overloaded`` body, ``retry-after`` and counts. A request whose
key is unknown passes on, to be answered 401 where it always was; a create with room passes
on to be admitted (or refused) as before, since the process may fill meanwhile.

The body is not read, so whether the create continues a conversation is not known here:
it is judged as one that starts one. While new conversations are refused, an HTTP
follow-up is too (503 with ``retry-after``); a WebSocket's turns never pass here, and
are admitted by the ceiling alone (turnpike.gateway.tenancy.shedding).
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import Headers

from turnpike.gateway.protocol.errors import ApiError

CREATE_PATH = "/v1/responses"


def refusal(scope: dict[str, Any]) -> ApiError | None:
    """The 503 for this request now, or None to serve it as usual."""
    if scope["method"] != "POST" or scope["path"] != CREATE_PATH:
        return None
    gateway = getattr(getattr(scope.get("app"), "state", None), "gateway", None)
    if gateway is None:
        return None
    in_flight = gateway.admission.in_flight
    if not in_flight.bound or (in_flight.starting < in_flight.soft and in_flight.has_room()):
        return None  # room for anyone: no need to know who asks
    try:
        tenant = gateway.keys.tenant_for(Headers(scope=scope))
    except ApiError:
        return None
    refused: ApiError | None = gateway.admission.refusal(tenant)
    return refused
