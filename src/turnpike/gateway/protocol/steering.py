"""``response.steer``: the client's frame, the server's three steer events, and the signal
a running response reads at its item boundaries. Pure: no I/O.

A steer names a response running on the same connection and gives user input for it.
The server owns the input once it answers ``response.steer.accepted``; the response
finishes the output item it is in and ends ``incomplete`` (reason ``steered``), or
completes if it ends first; then a successor the client did not ask for continues it
with the steer input, its ``response.created`` being the commit point. A response that
ends waiting on client tools keeps the input queued instead (``response.steer.pending``),
and the client's next create on that lane gets it prepended. The connection's part of
this lives in ``turnpike.gateway.api.websocket_protocol``; the engine's in
``turnpike.gateway.engine.generation``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from turnpike.gateway.protocol import bounds
from turnpike.gateway.protocol.errors import ApiError
from turnpike.gateway.protocol.events import Event, ResponseEvents
from turnpike.gateway.protocol.items import Item, normalize_input
from turnpike.ids import new_id

# The only fields of a steer frame; the target response decides the lane (no stream_id).
STEER_FIELDS = frozenset({"type", "previous_response_id", "input"})
MESSAGE_FIELDS = frozenset({"type", "role", "content"})
PART_TYPES = frozenset({"input_text", "input_image", "input_file"})
# The output items a response waits on the client for: a steer then stays pending.
CLIENT_CALLS = {
    "function_call": ("function_call_output", "name"),
    "custom_tool_call": ("custom_tool_call_output", None),
}


class SteerRefused(Exception):
    """A steer that will not be applied: the code and message of its failed event."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Steer:
    """An accepted steer: its id, the response it names, the input as sent (echoed on a
    failure) and as items (given to the successor)."""

    id: str
    previous_response_id: str
    raw_input: Any
    items: tuple[Item, ...]


def parse_steer(body: dict[str, Any], max_input_chars: int, raw_size: int) -> Steer:
    """The steer a frame asks for, or SteerRefused(invalid_input) saying what is wrong."""
    extra = sorted(set(body) - STEER_FIELDS)
    if extra:
        raise SteerRefused(
            "invalid_input",
            f"Unknown field {extra[0]!r} in response.steer: it takes only "
            "'previous_response_id' and 'input' (the response decides the lane).",
        )
    target = body.get("previous_response_id")
    if not isinstance(target, str) or not target:
        raise SteerRefused("invalid_input", "'previous_response_id' must be a response id.")
    raw = body.get("input")
    if isinstance(raw, str):
        if not raw:
            raise SteerRefused("invalid_input", "'input' must not be empty.")
    elif isinstance(raw, list) and raw:
        for index, message in enumerate(raw):
            _check_message(message, f"input[{index}]")
    else:
        raise SteerRefused(
            "invalid_input", "'input' must be a string or a non-empty array of user messages."
        )
    try:
        bounds.check_create({"input": raw}, raw_size, max_input_chars)
        items = normalize_input(raw)
    except ApiError as err:
        raise SteerRefused("invalid_input", err.message) from None
    return Steer(new_id("steer"), target, raw, tuple(items))


def _check_message(message: Any, param: str) -> None:
    if not isinstance(message, dict):
        raise SteerRefused("invalid_input", f"'{param}' must be a user message object.")
    if message.get("type", "message") != "message" or message.get("role") != "user":
        raise SteerRefused(
            "invalid_input",
            f"'{param}': steering takes only messages with the 'user' role; tool outputs "
            "and other items go in a response.create.",
        )
    extra = sorted(set(message) - MESSAGE_FIELDS)
    if extra:
        raise SteerRefused("invalid_input", f"'{param}' may hold only type, role and content.")
    content = message.get("content")
    if isinstance(content, str):
        return
    if not isinstance(content, list) or not content:
        raise SteerRefused("invalid_input", f"'{param}.content' must be a string or parts.")
    for index, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in PART_TYPES:
            raise SteerRefused(
                "invalid_input",
                f"'{param}.content[{index}]' must be an input_text, input_image or input_file part.",
            )


def required_input(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Stubs of the client tool results a response's output waits for (its calls)."""
    stubs = []
    for item in output:
        kind = CLIENT_CALLS.get(item.get("type", ""))
        if kind is None:
            continue
        output_type, named = kind
        stub = {"type": output_type, "call_id": item.get("call_id")}
        if named:
            stub[named] = item.get(named)
        stubs.append(stub)
    return stubs


def _echo(steer: Steer) -> dict[str, Any]:
    return {"id": steer.id, "previous_response_id": steer.previous_response_id}


def accepted(steer: Steer) -> Event:
    """``response.steer.accepted``, without its sequence number (the response's stream
    numbers it: ``SteerSignal``)."""
    return {"type": "response.steer.accepted", "steer": _echo(steer)}


def pending(steer: Steer, stubs: list[dict[str, Any]], sequence_number: int) -> Event:
    return {
        "type": "response.steer.pending",
        "sequence_number": sequence_number,
        "reason": "waiting_for_required_input",
        "required_input": stubs,
        "steer": _echo(steer),
    }


def failed(
    code: str,
    message: str,
    *,
    raw_input: Any,
    previous_response_id: Any,
    steer_id: str | None = None,
    sequence_number: int = 0,
) -> Event:
    """``response.steer.failed``: the input returned uncommitted, with the steer's id once
    one was given (a failure after acceptance)."""
    steer: dict[str, Any] = {"input": raw_input, "previous_response_id": previous_response_id}
    if steer_id is not None:
        steer["id"] = steer_id
    return {
        "type": "response.steer.failed",
        "sequence_number": sequence_number,
        "error": {"code": code, "message": message, "type": "invalid_request_error"},
        "steer": steer,
    }


def failed_after_acceptance(steer: Steer, code: str, message: str, sequence_number: int) -> Event:
    return failed(
        code,
        message,
        raw_input=steer.raw_input,
        previous_response_id=steer.previous_response_id,
        steer_id=steer.id,
        sequence_number=sequence_number,
    )


@dataclass
class SteerSignal:
    """What a running response and its connection share: whether a steer waits (read
    by the generation at each output item's end), and a way to put the acceptance into
    the response's own stream, numbered in sequence with its events. Once the response
    has decided its ending (``close``), acceptances wait in ``late``: the transport
    sends them after the terminal event, numbered after it, and the steer goes to the
    successor."""

    requested: bool = False
    late: list[Event] = field(default_factory=list)
    _events: ResponseEvents | None = None
    _emit: Callable[[Event], None] | None = None

    def attach(self, events: ResponseEvents, emit: Callable[[Event], None]) -> None:
        """The response's stream begins: acceptances go into it until ``close``."""
        self._events, self._emit = events, emit

    def close(self) -> None:
        self._emit = None

    def accept(self, event: Event) -> None:
        self.requested = True
        if self._events is None or self._emit is None:
            self.late.append(event)
        else:
            self._emit(self._events.numbered(event))
