"""The WebSocket protocol of one connection, as a sans-I/O state machine.

It takes frames, completion notices and the time, and answers with actions (start a
response, send an event, close the connection). It never touches a socket or a clock
(every call that depends on time is given ``now``), so every rule below is unit-tested
without one, as python-websockets tests its protocol core:

- one ``response.create`` per frame; requests on one lane (``stream_id``) run
  FIFO with no overlap: a create on a busy lane waits, and starts once the lane's
  current response has sent its terminal event (so it may continue that response
  with ``previous_response_id``);
- at most ``max_active`` responses run at once; further creates wait their turn, in
  the order their lanes became free;
- at most ``max_queued`` creates wait per connection (for their lane or for a slot);
  one more is refused with an error event on its lane (429, ``param: "stream_id"``);
- a create that fails validation is answered at once, never queued;
- at most ``max_lanes`` distinct named lanes (the default lane does not count);
- after the connection's lifetime, new creates are refused, and the connection closes
  (1001, going away: the SDK reconnects) once no response is running; creates still
  waiting then are not started: each gets an error event on its lane
  (``websocket_connection_limit_reached``), since a client never sees a frame it sent
  to a closed socket replayed. The transport calls ``on_timer`` at ``deadline()``;
- when the client goes away, creates still waiting are dropped (no one would read
  them); running responses finish (``on_disconnect``);
- a frame over ``max_frame_bytes`` (UTF-8 bytes, as on the wire) is refused;
- request-level errors are ``error`` events echoing the lane; the socket stays open;
- acknowledgements (``response.processed``, which Codex sends once it has committed a
  response) are ignored, whatever id they name; any other unknown type is an ``error``
  event on its lane, never a close;
- on a drain (the server stopping), the socket closes with 1012 once no response runs
  or waits (``on_drain``): right after a terminal event (the client is busy with it), or,
  when the drain finds it idle, after ``drain_idle_s`` without a create: a close races a
  create the client is sending, which the server then drops and the SDK does not send
  again (it was sent), so an idle socket first gets a moment to send one;
- ``response.steer`` names a response of this connection (``websocket_steering``); a
  response that ends with steers queued is followed by a successor on its lane, which
  keeps its slot and goes before the creates queued there;
- ``response.inject`` (beta: the upgrade named ``OpenAI-Beta: responses_multi_agent=v1``)
  names a ``multi_agent`` response running on this connection; its answers are on that
  response's lane (``turnpike.gateway.protocol.injection``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from turnpike.gateway.api.websocket_steering import ConnectionSteering, Ended, SteerRunning
from turnpike.gateway.protocol import bounds, injection
from turnpike.gateway.protocol.errors import ApiError, echo, invalid, too_large
from turnpike.gateway.protocol.injection import Inject
from turnpike.gateway.protocol.json_codec import parse_json
from turnpike.gateway.protocol.request import STREAM_ID_RE, CreateRequest, parse_create
from turnpike.gateway.protocol.steering import Steer
from turnpike.gateway.state.connection_cache import ConnectionCache

# Close code 1001, going away: the official clients reconnect on it.
CLOSE_GOING_AWAY = 1001
# 1012, service restart: a drain (the server is stopping); the clients reconnect on it too.
CLOSE_SERVICE_RESTART = 1012
# Client events that only acknowledge: nothing to answer, nothing to check.
ACKNOWLEDGEMENTS = frozenset({"response.processed"})


@dataclass(frozen=True)
class StartResponse:
    request: CreateRequest
    # The steers its response.created commits: a steered response's successor (which
    # the client did not send), or a create that continues a response waiting on tools.
    steers: tuple[Steer, ...] = ()
    successor: bool = False


@dataclass(frozen=True)
class SendEvent:
    event: dict[str, Any]


@dataclass(frozen=True)
class CloseConnection:
    code: int
    reason: str


@dataclass(frozen=True)
class InjectRunning:
    """A running multi_agent response is to commit an inject (its inbox decides)."""

    response_id: str
    inject: Inject
    lane: str | None


Action = StartResponse | SendEvent | CloseConnection | SteerRunning | InjectRunning


def _lane_of(body: Any) -> str | None:
    """The stream_id to echo on an error, when the frame named a valid one."""
    if isinstance(body, dict):
        stream_id = body.get("stream_id")
        if isinstance(stream_id, str) and STREAM_ID_RE.match(stream_id):
            return stream_id
    return None


class WsSession:
    def __init__(
        self,
        *,
        default_model: str,
        max_frame_bytes: int,
        max_active: int,
        max_queued: int,
        max_lanes: int,
        cache_size: int,
        lifetime_s: float,
        now: float,
        max_input_chars: int = 1024 * 1024,
        max_pending_steers: int = 8,
        multi_agent_beta: bool = False,
        drain_idle_s: float = 2.0,
    ) -> None:
        self.multi_agent_beta = multi_agent_beta
        self.drain_idle_s = drain_idle_s
        self._drain_at: float | None = None  # a drain found it idle: close then
        self.default_model = default_model
        self.max_input_chars = max_input_chars
        self.max_frame_bytes = max_frame_bytes
        self.max_active = max_active
        self.max_queued = max_queued
        self.max_lanes = max_lanes
        self.cache = ConnectionCache(cache_size)
        self.steering = ConnectionSteering(max_pending_steers, cache_size)
        self.lifetime_s = lifetime_s
        self.expires_at = now + lifetime_s
        self.closed = False
        self.gone = False  # the client disconnected
        self.draining = False  # the server is stopping: close once nothing runs
        self._named_lanes: set[str] = set()
        # A busy lane -> the creates queued behind its head (the head runs, or waits
        # in _ready for a slot).
        self._lanes: dict[str | None, deque[CreateRequest]] = {}
        # Heads of their lanes waiting for one of the max_active slots, in order.
        self._ready: deque[CreateRequest] = deque()
        self._active = 0
        self._queued = 0

    @property
    def idle(self) -> bool:
        return not self._lanes

    @property
    def queued(self) -> int:
        """Creates accepted but not started."""
        return self._queued

    def deadline(self, now: float) -> float | None:
        """When the transport must call ``on_timer``; None when no timer is due (once the
        lifetime is over and nothing waits, the last response to finish closes the
        connection)."""
        if self.closed:
            return None
        due = []
        if not (now >= self.expires_at and self._lanes and not self._queued):
            due.append(self.expires_at)
        if self._drain_at is not None and self.idle:
            due.append(self._drain_at)
        return min(due) if due else None

    def on_timer(self, now: float) -> list[Action]:
        actions: list[Action] = []
        if now >= self.expires_at:
            actions = self._expire_queued() + self._close_if_done(now)
        if self._drain_at is not None and now >= self._drain_at:
            actions += self._close_if_drained()
        return actions

    def on_frame(self, data: str | bytes, now: float) -> list[Action]:
        if _over(data, self.max_frame_bytes):
            return [SendEvent(too_large(self.max_frame_bytes, "Message").ws_event())]
        try:
            body = parse_json(data)
        except ApiError as err:
            return [SendEvent(err.ws_event())]
        lane = _lane_of(body)
        try:
            if not isinstance(body, dict):
                raise invalid("Each message must be a JSON object.", None, "invalid_body")
            kind = body.get("type")
            if kind == "response.create":
                bounds.check_create(body, len(data), self.max_input_chars)
                return self._on_create(body, now)
            if kind == "response.steer":
                answers = self.steering.on_steer(body, len(data), self.max_input_chars)
                return [a if isinstance(a, SteerRunning) else SendEvent(a) for a in answers]
            if kind == "response.inject" and self.multi_agent_beta:
                return self._on_inject(body, len(data))
            if kind in ACKNOWLEDGEMENTS:
                return []
            if not isinstance(kind, str):
                raise invalid(
                    "Missing required parameter: 'type'.", "type", "missing_required_parameter"
                )
            if kind == "response.inject":
                raise invalid(
                    "response.inject is a beta event: open the connection with the header "
                    f"OpenAI-Beta: {injection.BETA_FEATURE}.",
                    "type",
                    "unknown_event_type",
                )
            raise invalid(
                f"Unknown client event type {echo(kind)}. Expected 'response.create' or 'response.steer'.",
                "type",
                "unknown_event_type",
            )
        except ApiError as err:
            return [SendEvent(err.ws_event(lane))]

    def _on_inject(self, body: dict[str, Any], raw_size: int) -> list[Action]:
        """An inject for a running multi_agent response, or its answer: not found or
        ended (``response.inject.failed``), or an error event on the response's lane."""
        target = body.get("response_id")
        request = self.steering.running(target) if isinstance(target, str) else None
        lane = request.stream_id if request is not None else None
        try:
            inject = injection.parse_inject(body, self.max_input_chars, raw_size)
        except ApiError as err:
            return [SendEvent(err.ws_event(lane))]
        if request is None:
            ended = self.steering.has_ended(inject.response_id)
            code = "response_already_completed" if ended else "response_not_found"
            message = (
                f"Response {inject.response_id!r} has ended; send the items in a "
                "response.create continuing it."
                if ended
                else f"No response {inject.response_id!r} is running on this connection."
            )
            return [
                SendEvent(
                    injection.failed(
                        code, message, response_id=inject.response_id, raw_input=inject.raw_input
                    )
                )
            ]
        if not request.multi_agent:
            return [SendEvent(injection.not_enabled(inject.response_id).ws_event(lane))]
        return [InjectRunning(inject.response_id, inject, lane)]

    def _on_create(self, body: dict[str, Any], now: float) -> list[Action]:
        fields = {k: v for k, v in body.items() if k != "type"}
        # openai-agents always sends stream: true; on a socket streaming is implied.
        fields.pop("stream", None)
        request = parse_create(
            fields,
            default_model=self.default_model,
            websocket=True,
            multi_agent_beta=self.multi_agent_beta,
        )
        lane = request.stream_id
        if now >= self.expires_at:
            raise invalid(
                "This connection reached its maximum lifetime; open a new connection.",
                None,
                "websocket_connection_limit_reached",
            )
        busy = lane in self._lanes
        if busy or self._active >= self.max_active:
            if self._queued >= self.max_queued:
                raise ApiError(
                    429,
                    f"This connection already has {self.max_queued} response.create "
                    "requests waiting, the limit; wait for a terminal event first.",
                    code="websocket_queue_limit_reached",
                    param="stream_id",
                )
        if lane is not None and lane not in self._named_lanes:
            if len(self._named_lanes) >= self.max_lanes:
                raise invalid(
                    f"This connection already uses {self.max_lanes} named streams, the limit.",
                    "stream_id",
                    "websocket_stream_limit_reached",
                )
            self._named_lanes.add(lane)
        if busy:
            self._lanes[lane].append(request)
            self._queued += 1
            return []
        self._lanes[lane] = deque()
        if self._active >= self.max_active:
            self._ready.append(request)
            self._queued += 1
            return []
        self._active += 1
        return self._start(request)

    def _start(self, request: CreateRequest) -> list[Action]:
        """Start a create, with the steers waiting on its lane when it continues their
        response."""
        outcome = self.steering.take_waiting(request)
        actions: list[Action] = [SendEvent(event) for event in outcome.events]
        actions.append(StartResponse(outcome.successor or request, outcome.steers))
        return actions

    def on_response_started(self, request: CreateRequest, response_id: str) -> None:
        """The response's ``response.created`` was sent: it can be steered."""
        self.steering.started(request, response_id)

    def on_drain(self, now: float) -> list[Action]:
        """The server is stopping: the socket closes (1012) once no response runs or
        waits, never in the middle of one; what the client sends meanwhile is served.
        Idle now, it closes after ``drain_idle_s``, or after the terminal event of a
        create sent meanwhile."""
        self.draining = True
        if self.idle and self.drain_idle_s > 0:
            self._drain_at = now + self.drain_idle_s
            return []
        return self._close_if_drained()

    def _close_if_drained(self) -> list[Action]:
        if self.closed or self._lanes or not self.draining:
            return []
        self.closed = True
        return [CloseConnection(CLOSE_SERVICE_RESTART, "the server is restarting")]

    def on_disconnect(self) -> None:
        """The client went away: nothing waiting starts any more."""
        self.gone = True
        for behind in self._lanes.values():
            behind.clear()
        for head in self._ready:
            del self._lanes[head.stream_id]
        self._ready.clear()
        self._queued = 0

    def on_response_done(
        self, request: CreateRequest, now: float, ended: Ended | None = None
    ) -> list[Action]:
        """A response reached its terminal event (``ended``; None when it failed before
        starting): a successor takes its place when it was steered; otherwise the next
        create on its lane becomes ready, and ready creates fill the free slots."""
        live = not self.gone and now < self.expires_at
        outcome = self.steering.ended(request, ended, can_start=live)
        steer_events: list[Action] = [SendEvent(event) for event in outcome.events]
        if outcome.successor is not None:
            # The same turn goes on: it keeps the slot and the lane.
            return [*steer_events, StartResponse(outcome.successor, outcome.steers, True)]
        self._active -= 1
        lane = request.stream_id
        behind = self._lanes[lane]
        if behind:
            self._ready.append(behind.popleft())
        else:
            del self._lanes[lane]
        if self.gone:
            return []
        if now >= self.expires_at:
            return steer_events + self._expire_queued() + self._close_if_done(now)
        actions = steer_events
        while self._ready and self._active < self.max_active:
            self._active += 1
            self._queued -= 1
            actions.extend(self._start(self._ready.popleft()))
        return actions + self._close_if_drained()

    def _expire_queued(self) -> list[Action]:
        """The lifetime is over: creates still waiting will not start; each is answered
        on its lane so the client can send it again on a new connection."""
        if not self._queued:
            return []
        waiting = list(self._ready)
        for head in self._ready:
            waiting.extend(self._lanes.pop(head.stream_id))
        for behind in self._lanes.values():
            waiting.extend(behind)
            behind.clear()
        self._ready.clear()
        self._queued = 0
        error = invalid(
            "This connection reached its maximum lifetime before this response could "
            "start; send it again on a new connection.",
            None,
            "websocket_connection_limit_reached",
        )
        return [SendEvent(error.ws_event(request.stream_id)) for request in waiting]

    def _close_if_done(self, now: float) -> list[Action]:
        if self.closed or self._lanes or now < self.expires_at:
            return []
        self.closed = True
        return [
            CloseConnection(
                CLOSE_GOING_AWAY, f"connection lifetime of {int(self.lifetime_s)}s reached"
            )
        ]


def _over(data: str | bytes, limit: int) -> bool:
    """Whether a frame is over ``limit`` bytes as UTF-8 (encoding only when its
    length in characters cannot tell: each is one to four bytes)."""
    if isinstance(data, bytes) or len(data) > limit:
        return len(data) > limit
    if 4 * len(data) <= limit:
        return False
    return len(data.encode("utf-8", "surrogatepass")) > limit
