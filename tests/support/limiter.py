"""What the gateway's limiters hand out, as tests take it."""

from __future__ import annotations

from turnpike.gateway.tenancy.limits.core import Admission, Ticket


def ticket_of(admission: Admission) -> Ticket:
    """The ticket of an admitted request, to settle it with (a refusal has none)."""
    assert admission.ticket is not None, admission
    return admission.ticket
