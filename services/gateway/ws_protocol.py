"""The WebSocket protocol of one connection, as a sans-I/O state machine.

It takes frames and completion notices, and answers with actions (start a
response, send an event). It never touches a socket, so every rule below is
unit-tested without one:

- one ``response.create`` per frame; requests on one lane (``stream_id``) run
  one at a time, and a create on a busy lane is refused (clients wait for the
  terminal event before sending the next);
- at most ``max_active`` responses run at once; further creates wait their turn;
- at most ``max_lanes`` distinct named lanes (the default lane does not count);
- after the connection's lifetime, new creates are refused and the transport
  closes the socket once idle;
- request-level errors are ``error`` events echoing the lane; the socket stays open.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from gateway.errors import ApiError, invalid, too_large
from gateway.gateway_core import parse_json
from gateway.request import STREAM_ID_RE, CreateRequest, parse_create
from gateway.state import ConnectionCache

DEFAULT_LANE = None


@dataclass(frozen=True)
class StartResponse:
    request: CreateRequest


@dataclass(frozen=True)
class SendEvent:
    event: dict[str, Any]


Action = StartResponse | SendEvent


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
        max_lanes: int,
        cache_size: int,
    ) -> None:
        self.default_model = default_model
        self.max_frame_bytes = max_frame_bytes
        self.max_active = max_active
        self.max_lanes = max_lanes
        self.cache = ConnectionCache(cache_size)
        self.expired = False
        self._named_lanes: set[str] = set()
        self._busy: set[str | None] = set()
        self._active = 0
        self._waiting: deque[CreateRequest] = deque()

    @property
    def idle(self) -> bool:
        return not self._busy

    def on_frame(self, data: str | bytes) -> list[Action]:
        if len(data) > self.max_frame_bytes:
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
                return self._on_create(body)
            if kind == "response.steer":
                return [SendEvent(self._steer_failed(body))]
            if not isinstance(kind, str):
                raise invalid(
                    "Missing required parameter: 'type'.", "type", "missing_required_parameter"
                )
            raise invalid(
                f"Unknown client event type '{kind}'. Expected 'response.create' or 'response.steer'.",
                "type",
                "unknown_event_type",
            )
        except ApiError as err:
            return [SendEvent(err.ws_event(lane))]

    def _on_create(self, body: dict[str, Any]) -> list[Action]:
        fields = {k: v for k, v in body.items() if k != "type"}
        # openai-agents always sends stream: true; on a socket streaming is implied.
        fields.pop("stream", None)
        fields.pop("stream_options", None)
        request = parse_create(fields, default_model=self.default_model, websocket=True)
        lane = request.stream_id
        if self.expired:
            raise ApiError(
                400,
                "This connection reached its maximum lifetime; open a new connection.",
                code="websocket_connection_limit_reached",
            )
        if lane in self._busy:
            raise ApiError(
                409,
                f"A response is already in progress on stream '{lane or 'default'}'; wait for its "
                "terminal event before sending another response.create on it.",
                code="stream_busy",
                param="stream_id",
            )
        if lane is not None and lane not in self._named_lanes:
            if len(self._named_lanes) >= self.max_lanes:
                raise ApiError(
                    400,
                    f"This connection already uses {self.max_lanes} named streams, the limit.",
                    code="websocket_stream_limit_reached",
                    param="stream_id",
                )
            self._named_lanes.add(lane)
        self._busy.add(lane)
        if self._active >= self.max_active:
            self._waiting.append(request)
            return []
        self._active += 1
        return [StartResponse(request)]

    def on_response_done(self, request: CreateRequest) -> list[Action]:
        """A response reached its terminal event (or failed before starting)."""
        self._busy.discard(request.stream_id)
        self._active -= 1
        if self._waiting and self._active < self.max_active:
            self._active += 1
            return [StartResponse(self._waiting.popleft())]
        return []

    @staticmethod
    def _steer_failed(body: dict[str, Any]) -> dict[str, Any]:
        return {
            "type": "response.steer.failed",
            "sequence_number": 0,
            "error": {
                "code": "steering_not_supported",
                "message": "This server does not support steering; send a new response.create instead.",
                "type": "invalid_request_error",
            },
            "steer": {
                "input": body.get("input"),
                "previous_response_id": body.get("previous_response_id"),
            },
        }
