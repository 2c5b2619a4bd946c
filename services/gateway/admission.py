"""Admission control: whether a create request may start now, and, once its response
ends, what it used. Two parts decide:

- overload shedding (``gateway.shedding``), per process: past the in-flight bound a fast
  503 ``server_overloaded``, the tenant over its fair share refused first;
- the tenant's limits (``gateway.limits``): requests and tokens per minute, a token
  budget per period, responses at once, shared by every gateway process through Redis
  when it is configured. Over a limit: 429 ``rate_limit_exceeded``, or
  ``insufficient_quota`` for a spent budget.

Tokens are reserved at admission from an estimate (the new input's size and the output
asked for) and settled at the end with the response's real usage.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from gateway import metrics
from gateway.errors import ApiError, echo, invalid
from gateway.limits import Limiter, Ticket
from gateway.request import CreateRequest
from gateway.shedding import InFlight, Shed
from gateway.tenants import TenantLimits

log = logging.getLogger(__name__)

# Output tokens reserved for a request that does not say how many it wants; settled
# against what it really generated.
DEFAULT_OUTPUT_ESTIMATE = 1024
# Bytes of request body per input token, roughly (JSON of English text).
BYTES_PER_TOKEN = 4
# What a shed request is told to wait before trying again.
SHED_RETRY_AFTER_S = 1


@dataclass
class Pass:
    """An admitted response: what releasing it needs, and the rate-limit headers its
    HTTP response carries."""

    tenant: str
    ticket: Ticket | None
    headers: dict[str, str] = field(default_factory=dict)
    released: bool = False


class AdmissionControl:
    def __init__(self, limiter: Limiter, in_flight: InFlight) -> None:
        self.limiter = limiter
        self.in_flight = in_flight

    async def admit(
        self, tenant: str, limits: TenantLimits, request: CreateRequest, body_bytes: int
    ) -> Pass:
        """A pass for the request, or an ApiError (400 for a model the tenant may not
        use, 503 when shedding, 429 over a limit) carrying the headers to send."""
        if not limits.allows_model(request.model):
            raise invalid(
                f"The model {echo(request.model)} does not exist or you do not have access to it.",
                "model",
                "model_not_found",
            )
        if (shed := self.in_flight.try_admit(tenant)) is not None:
            metrics.SHED.labels(shed.reason).inc()
            raise overloaded(shed)
        try:
            decision = await self.limiter.admit(
                tenant, limits, estimate_tokens(request, body_bytes)
            )
        except BaseException:
            self.in_flight.release(tenant)
            raise
        if not decision.allowed:
            self.in_flight.release(tenant)
            raise rate_limited(decision.reason, decision.retry_after_s, decision.headers)
        return Pass(tenant, decision.ticket, dict(decision.headers))

    async def release(self, admitted: Pass | None, used_tokens: int) -> None:
        """The response ended (whatever its status): charge what it used, free its slot.
        Idempotent."""
        if admitted is None or admitted.released:
            return
        admitted.released = True
        self.in_flight.release(admitted.tenant)
        if admitted.ticket is not None:
            try:
                await self.limiter.settle(admitted.ticket, used_tokens)
            except Exception:
                # The response is served and billed; only the limiter's view is off.
                log.exception("settling the rate limit of %s failed", admitted.tenant)

    async def close(self) -> None:
        await self.limiter.close()


def estimate_tokens(request: CreateRequest, body_bytes: int) -> int:
    output = request.max_output_tokens or DEFAULT_OUTPUT_ESTIMATE
    return body_bytes // BYTES_PER_TOKEN + output


def overloaded(shed: Shed) -> ApiError:
    return ApiError(
        503,
        "The server is overloaded: too many responses are in flight. Retry shortly.",
        type="server_error",
        code="server_overloaded",
        headers={"retry-after": str(SHED_RETRY_AFTER_S)},
    )


def rate_limited(
    reason: str | None, retry_after_s: float | None, headers: dict[str, str]
) -> ApiError:
    headers = dict(headers)
    if retry_after_s is not None:
        headers["retry-after"] = str(max(1, math.ceil(retry_after_s)))
    if reason == "budget":
        return ApiError(
            429,
            "You exceeded your token budget for this period. It renews at the start of the "
            "next one.",
            type="insufficient_quota",
            code="insufficient_quota",
            headers=headers,
        )
    what = {
        "requests": "requests per minute",
        "tokens": "tokens per minute",
        "concurrency": "responses at once",
    }.get(reason or "", "rate limit")
    wait = f" Please try again in {retry_after_s:.1f}s." if retry_after_s is not None else ""
    return ApiError(
        429,
        f"Rate limit reached on {what}.{wait}",
        type=reason or "requests",
        code="rate_limit_exceeded",
        headers=headers,
    )


def connection_refused(retry_after_s: float | None = None) -> ApiError:
    headers = {} if retry_after_s is None else {"retry-after": str(math.ceil(retry_after_s))}
    return ApiError(
        429,
        "Too many WebSocket connections open for this key. Close one and try again.",
        type="connections",
        code="rate_limit_exceeded",
        headers=headers,
    )
