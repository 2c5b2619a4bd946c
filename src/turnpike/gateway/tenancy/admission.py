"""Admission control: whether a create request may start now, and, once its response
ends, what it used. Two parts decide:

- overload shedding (``turnpike.gateway.tenancy.shedding``), per process: past the in-flight bound a fast
  503 ``server_overloaded``, the tenant over its fair share refused first. The bound is
  adaptive (``turnpike.gateway.tenancy.adaptive_limit``: each response's time to first token
  comes back here through its pass) under the ceiling ``TURNPIKE_MAX_IN_FLIGHT``, or fixed
  at it. ``refusal`` makes the same decision without counting, for the edge to refuse a
  create before its body is read (``turnpike.gateway.api.edge_shedding``);
- the tenant's limits (``turnpike.gateway.tenancy.limits``): requests and tokens per minute, a token
  budget per period, responses at once, shared by every gateway process through Redis
  when it is configured. Over a limit: 429 ``rate_limit_exceeded``, or
  ``insufficient_quota`` for a spent budget.

Tokens are reserved at admission from an estimate (the new input's size and the output
asked for) and settled at the end with the response's real usage.

One owner gives a slot back, so that no exit can leak it (a leaked slot refuses every
tenant of the process until a restart): ``AdmissionControl.hold`` owns the slot while
the request is prepared and releases it on any exit, unless ``ResponseEngine.start``
has handed it to the response's task, which releases it when the response ends.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from turnpike.gateway import metrics
from turnpike.gateway.protocol.errors import ApiError, echo, invalid
from turnpike.gateway.protocol.request import CreateRequest
from turnpike.gateway.tenancy.adaptive_limit import AdaptiveLimit
from turnpike.gateway.tenancy.limits import Limiter, Ticket
from turnpike.gateway.tenancy.shedding import InFlight, Shed
from turnpike.gateway.tenancy.tenant_limits import TenantLimits

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
    # It continues a conversation (turnpike.gateway.tenancy.shedding): counted as such.
    continuing: bool = False
    released: bool = False
    # Set when a response's task took the pass over: it releases it, not ``hold``.
    handed_over: bool = False
    # For the adaptive limit: when the slot was taken (its clock), the cohort then, and
    # where the wait for the first token goes.
    admitted_at: float = 0.0
    cohort: int = 0
    sample: Callable[[float, int], None] | None = None

    def first_token(self, at: float) -> None:
        """The response's first output token left at ``at`` (the limit's clock)."""
        if self.sample is not None:
            self.sample(at - self.admitted_at, self.cohort)
            self.sample = None  # one sample a response (a rollout's later steps: none)


class AdmissionControl:
    def __init__(
        self, limiter: Limiter, in_flight: InFlight, adaptive: AdaptiveLimit | None = None
    ) -> None:
        self.limiter = limiter
        self.in_flight = in_flight
        # ``in_flight``'s bound is the ceiling; 0 turns shedding off, adaptive or not.
        self.ceiling = in_flight.ceiling
        self.adaptive = adaptive if in_flight.bound else None
        if self.adaptive is not None:
            in_flight.bound = self.adaptive.limit
        self._settling: set[asyncio.Task[None]] = set()
        self._publish()

    @asynccontextmanager
    async def hold(
        self, tenant: str, limits: TenantLimits, request: CreateRequest, body_bytes: int
    ) -> AsyncIterator[Pass]:
        """Admit the request (``admit``) for the block: its pass is released when the
        block exits, however it exits, unless the block handed it to a response's task
        (``Pass.handed_over``)."""
        admitted = await self.admit(tenant, limits, request, body_bytes)
        try:
            yield admitted
        finally:
            if not admitted.handed_over:
                await self.release(admitted, 0)

    def can_admit(self) -> bool:
        """Whether the process has room for a new conversation (readiness, a new socket)."""
        return self.in_flight.has_room()

    def refusal(self, tenant: str) -> ApiError | None:
        """The 503 a create of ``tenant`` that starts a conversation gets now (counted as
        shed), or None: the same decision as ``admit``'s, without taking a slot."""
        if (shed := self.in_flight.check(tenant)) is None:
            return None
        return self._shed(shed)

    def _shed(self, shed: Shed) -> ApiError:
        if self.adaptive is not None:
            self.adaptive.in_use(self.in_flight.starting)  # refused: the limit is used
        metrics.SHED.labels(shed.reason).inc()
        return overloaded(shed)

    def _sample(self, waited_s: float, cohort: int) -> None:
        assert self.adaptive is not None
        self.adaptive.sample(waited_s, cohort, self.in_flight.starting)
        self.in_flight.bound = self.adaptive.limit
        self._publish()

    def _publish(self) -> None:
        metrics.ADMISSION_LIMIT.set(self.in_flight.bound)
        if self.adaptive is not None:
            if (signal := self.adaptive.signal_s) is not None:
                metrics.ADMISSION_LATENCY.set(signal)
            if (baseline := self.adaptive.baseline_s) is not None:
                metrics.ADMISSION_BASELINE.set(baseline)

    def describe(self) -> dict[str, object]:
        """The admission block of /readyz."""
        block: dict[str, object] = {
            "in_flight": self.in_flight.total,
            "starting": self.in_flight.starting,
            "bound": self.in_flight.bound,
            "ceiling": self.ceiling,
            "adaptive": self.adaptive is not None,
        }
        if self.adaptive is not None:
            signal, baseline = self.adaptive.signal_s, self.adaptive.baseline_s
            block["time_to_first_token_ms"] = None if signal is None else round(signal * 1000, 1)
            block["baseline_ms"] = None if baseline is None else round(baseline * 1000, 1)
        return block

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
        # A turn that continues a conversation is work already admitted: bound only by
        # the ceiling (turnpike.gateway.tenancy.shedding).
        continuing = bool(request.previous_response_id or request.conversation)
        if (shed := self.in_flight.try_admit(tenant, continuing)) is not None:
            raise self._shed(shed)
        metrics.ADMISSION_SLOTS.inc()
        admitted = Pass(tenant, None, continuing=continuing)
        if self.adaptive is not None:
            self.adaptive.in_use(self.in_flight.starting)
            admitted.admitted_at = self.adaptive.now()
            admitted.cohort, admitted.sample = self.adaptive.cohort, self._sample
        try:
            decision = await self.limiter.admit(
                tenant, limits, estimate_tokens(request, body_bytes)
            )
        except BaseException:
            self._free_slot(admitted)
            raise
        if not decision.allowed:
            self._free_slot(admitted)
            raise rate_limited(decision.reason, decision.retry_after_s, decision.headers)
        admitted.ticket, admitted.headers = decision.ticket, dict(decision.headers)
        return admitted

    def _free_slot(self, admitted: Pass) -> None:
        self.in_flight.release(admitted.tenant, admitted.continuing)
        metrics.ADMISSION_SLOTS.dec()

    async def release(self, admitted: Pass | None, used_tokens: int) -> None:
        """The response ended (whatever its status): charge what it used, free its slot.
        Idempotent."""
        if admitted is None or admitted.released:
            return
        admitted.released = True
        self._free_slot(admitted)
        if admitted.ticket is not None:
            # In a task of its own: a caller cancelled mid-settle (a client gone, a
            # shutdown) must not leave the tenant's concurrency slot taken in the limiter.
            task = asyncio.create_task(self._settle(admitted, used_tokens))
            self._settling.add(task)
            task.add_done_callback(self._settling.discard)
            await asyncio.shield(task)

    async def _settle(self, admitted: Pass, used_tokens: int) -> None:
        assert admitted.ticket is not None
        try:
            await self.limiter.settle(admitted.ticket, used_tokens)
        except Exception:
            # The response is served and billed; only the limiter's view is off.
            log.exception("settling the rate limit of %s failed", admitted.tenant)

    async def close(self) -> None:
        if self._settling:
            await asyncio.wait(list(self._settling), timeout=5)
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
