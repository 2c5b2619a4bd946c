"""The steering state of one WebSocket connection, sans I/O (``WsSession`` holds one).

It knows which responses run on the connection (steering works only on the connection
that holds the response), the steers each has queued (at most ``max_pending`` each),
and, per lane, the response that ended waiting on client tools with steers still
queued. It decides, when a response ends, whether a successor starts (and with what),
and answers every steer frame with one of the steer events
(``turnpike.gateway.protocol.steering``).

Choices where OpenAI's documents leave them open (docs/api.md, "Steering"):
- a steer naming a response of this connection that already ended is
  ``response_already_completed``, unless it ended waiting on client tools: then it is
  accepted and pending at once, as if it had come a moment earlier;
- a create on that lane continuing another response, or none, drops the pending steers
  with ``response_not_active`` (their input is returned);
- responses bound to a ``conversation``, using ``context_management``, not generating
  (``generate: false``) or taking injects (``multi_agent``) are ``steering_not_supported``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from turnpike.gateway.protocol import steering
from turnpike.gateway.protocol.request import CreateRequest
from turnpike.gateway.protocol.steering import Steer, SteerRefused
from turnpike.lru import LruCache


@dataclass(frozen=True)
class Ended:
    """How a response of the connection ended, from the last event it sent."""

    response_id: str
    status: str  # completed, incomplete, failed or cancelled
    required_input: list[dict[str, Any]]  # stubs of the client calls it waits on
    last_sequence_number: int


def ended_from(terminal: dict[str, Any], last_sequence_number: int) -> Ended | None:
    """The ending a terminal event shows; None for an ``error`` (no response ran)."""
    response = terminal.get("response")
    if terminal["type"] == "error" or not isinstance(response, dict):
        return None
    return Ended(
        response["id"],
        response["status"],
        steering.required_input(response.get("output") or []),
        last_sequence_number,
    )


@dataclass(frozen=True)
class SteerRunning:
    """Action: a running response takes a steer (its acceptance goes into its stream)."""

    response_id: str
    event: dict[str, Any]


@dataclass
class _Waiting:
    """A response that ended waiting on client tools, with the steers queued for it."""

    response_id: str
    steers: list[Steer]
    stubs: list[dict[str, Any]]
    next_sequence_number: int


@dataclass
class SteerOutcome:
    """What a response's end means for steering: a successor to start (committing
    ``steers``), and the steer events to send."""

    successor: CreateRequest | None = None
    steers: tuple[Steer, ...] = ()
    events: list[dict[str, Any]] = field(default_factory=list)


def _on_lane(event: dict[str, Any], lane: str | None) -> dict[str, Any]:
    if lane is not None:
        event["stream_id"] = lane
    return event


def _unsteerable(request: CreateRequest) -> str | None:
    if request.conversation is not None:
        return "Responses bound to a conversation cannot be steered."
    if request.compact_threshold is not None:
        return "Responses with context_management (automatic compaction) cannot be steered."
    if not request.generate:
        return "A response with generate: false produces no output to steer."
    if request.multi_agent:
        return "A multi_agent response takes its input by response.inject."
    return None


class ConnectionSteering:
    def __init__(self, max_pending: int, remembered: int) -> None:
        self.max_pending = max_pending
        self._running: dict[str, CreateRequest] = {}
        self._queued: dict[str, list[Steer]] = {}
        self._waiting: dict[str | None, _Waiting] = {}
        self._ended: LruCache[str, bool] = LruCache(remembered)

    def started(self, request: CreateRequest, response_id: str) -> None:
        """The response's ``response.created`` left: from now on it can be steered."""
        self._running[response_id] = request

    def running(self, response_id: str) -> CreateRequest | None:
        """The request of a response running on the connection (injects need it too)."""
        return self._running.get(response_id)

    def has_ended(self, response_id: str) -> bool:
        """Whether a response of the connection ended (among the latest remembered)."""
        return response_id in self._ended

    def on_steer(
        self, body: dict[str, Any], raw_size: int, max_input_chars: int
    ) -> list[SteerRunning | dict[str, Any]]:
        """A ``response.steer`` frame: a SteerRunning for a running response, or the
        events to send (a failure, or acceptance and pending for a waiting one)."""
        try:
            steer = steering.parse_steer(body, max_input_chars, raw_size)
        except SteerRefused as refused:
            return [self._refusal(body, refused)]
        target = steer.previous_response_id
        request = self._running.get(target)
        if request is not None:
            lane = request.stream_id
            queued = self._queued.setdefault(target, [])
            reason = _unsteerable(request)
            if reason is None and len(queued) >= self.max_pending:
                return [_on_lane(self._too_many(body), lane)]
            if reason is not None:
                return [
                    _on_lane(
                        self._refusal(body, SteerRefused("steering_not_supported", reason)), lane
                    )
                ]
            queued.append(steer)
            return [SteerRunning(target, _on_lane(steering.accepted(steer), lane))]
        for lane, waiting in self._waiting.items():
            if waiting.response_id == target:
                if len(waiting.steers) >= self.max_pending:
                    return [_on_lane(self._too_many(body), lane)]
                waiting.steers.append(steer)
                seq = waiting.next_sequence_number
                waiting.next_sequence_number += 2
                accepted = {**steering.accepted(steer), "sequence_number": seq}
                pending = steering.pending(steer, waiting.stubs, seq + 1)
                return [_on_lane(accepted, lane), _on_lane(pending, lane)]
        if target in self._ended:
            refusal = SteerRefused(
                "response_already_completed",
                f"Response {target!r} has ended; send a response.create continuing it.",
            )
        else:
            refusal = SteerRefused(
                "response_not_found",
                f"No response {target!r} is running on this connection; a steer names a "
                "response of the connection it is sent on.",
            )
        return [self._refusal(body, refusal)]

    def ended(
        self, request: CreateRequest, ended: Ended | None, *, can_start: bool
    ) -> SteerOutcome:
        """A response of the connection sent its last event. With steers queued, a
        response that finished gets a successor (unless ``can_start`` is false: the
        connection is closing), one that waits on client tools keeps them pending, and
        one that failed or was cancelled returns them."""
        if ended is None:
            return SteerOutcome()
        self._running.pop(ended.response_id, None)
        self._ended.put(ended.response_id, True)
        steers = self._queued.pop(ended.response_id, [])
        lane = request.stream_id
        seq = ended.last_sequence_number + 1
        finished = ended.status in ("completed", "incomplete")
        if not steers and not (finished and ended.required_input):
            return SteerOutcome()
        if not finished or not can_start:
            code = "response_not_active" if can_start else "successor_creation_failed"
            why = (
                f"The response ended {ended.status} before taking the steer."
                if can_start
                else "The connection reached its lifetime; send the input again on a new one."
            )
            return SteerOutcome(events=_failed_all(steers, code, why, seq, lane))
        if ended.required_input:
            outcome = SteerOutcome(events=self._drop_waiting(lane, seq))
            seq += len(outcome.events)
            self._waiting[lane] = _Waiting(
                ended.response_id, steers, ended.required_input, seq + len(steers)
            )
            for i, steer in enumerate(steers):
                outcome.events.append(
                    _on_lane(steering.pending(steer, ended.required_input, seq + i), lane)
                )
            return outcome
        successor = dataclasses.replace(
            request,
            input_items=[item for steer in steers for item in steer.items],
            previous_response_id=ended.response_id,
            compact_now=False,
        )
        return SteerOutcome(successor, tuple(steers))

    def take_waiting(self, request: CreateRequest) -> SteerOutcome:
        """A create starts on a lane: when it continues the response that waits there,
        the queued steer input goes first in its input; any other create drops it."""
        waiting = self._waiting.get(request.stream_id)
        if waiting is None:
            return SteerOutcome()
        del self._waiting[request.stream_id]
        if request.previous_response_id != waiting.response_id:
            events = _failed_all(
                waiting.steers,
                "response_not_active",
                "A response.create on this lane did not continue the steered response.",
                waiting.next_sequence_number,
                request.stream_id,
            )
            return SteerOutcome(request, (), events)
        steer_items = [item for steer in waiting.steers for item in steer.items]
        continued = dataclasses.replace(request, input_items=[*steer_items, *request.input_items])
        return SteerOutcome(continued, tuple(waiting.steers))

    def _drop_waiting(self, lane: str | None, seq: int) -> list[dict[str, Any]]:
        earlier = self._waiting.pop(lane, None)
        if earlier is None:
            return []
        return _failed_all(
            earlier.steers, "response_not_active", "A later response replaced it.", seq, lane
        )

    def _too_many(self, body: dict[str, Any]) -> dict[str, Any]:
        return self._refusal(
            body,
            SteerRefused(
                "too_many_pending_steers",
                f"The response already has {self.max_pending} steers queued, the limit; "
                "wait for its successor.",
            ),
        )

    @staticmethod
    def _refusal(body: dict[str, Any], refused: SteerRefused) -> dict[str, Any]:
        return steering.failed(
            refused.code,
            refused.message,
            raw_input=body.get("input"),
            previous_response_id=body.get("previous_response_id"),
        )


def successor_failed(
    steers: tuple[Steer, ...], message: str, lane: str | None
) -> list[dict[str, Any]]:
    """The steers of a successor that could not start, each returned."""
    return _failed_all(list(steers), "successor_creation_failed", message, 0, lane)


def _failed_all(
    steers: list[Steer], code: str, message: str, seq: int, lane: str | None
) -> list[dict[str, Any]]:
    return [
        _on_lane(steering.failed_after_acceptance(steer, code, message, seq + i), lane)
        for i, steer in enumerate(steers)
    ]
