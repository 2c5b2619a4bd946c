"""``response.inject`` (beta, ``OpenAI-Beta: responses_multi_agent=v1``): the client's
frame, the server's two inject events, and the inbox a waiting response reads. Pure: no
I/O.

A response created with ``multi_agent: {"enabled": true}`` on a connection opened with
the beta header is one long-running rollout: when a step of the model ends with calls
of the client's tools, the response does not complete; it waits until an inject has
committed an output for every call, then samples again from the conversation with the
outputs added, in the same response (its output holds the calls, the committed items and
what the model did next). It completes when a step ends without client calls. The
source design's ``response.append``: the work before and after inference (admission, the
response's creation and storing, billing) happens once per rollout, and each step sends
only what is new.

An inject is validated and committed atomically: every item or none. It carries outputs
of the response's calls still unanswered (``function_call_output``,
``custom_tool_call_output``) and, beside them, user messages (what a create's input would
carry with the outputs; OpenAI's server takes only tool outputs for now). A response
that is no longer waiting, or has decided its ending, answers ``response.inject.failed``
(``response_already_completed``) with the input returned; an id the connection does not
hold, ``response_not_found``. Malformed input is an ``error`` event (400) naming the
field, as a malformed create is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from turnpike.gateway.protocol import bounds
from turnpike.gateway.protocol.errors import ApiError, echo, invalid
from turnpike.gateway.protocol.events import Event, ResponseEvents
from turnpike.gateway.protocol.items import Item, normalize_input
from turnpike.gateway.protocol.steering import CLIENT_CALLS
from turnpike.ids import new_id

# The beta feature an upgrade must name (``OpenAI-Beta``) for inject and multi_agent.
BETA_FEATURE = "responses_multi_agent=v1"
INJECT_FIELDS = frozenset({"type", "response_id", "input"})
# As OpenAI's reference bounds an inject's input.
MAX_INJECT_ITEMS = 16_384
OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})


def beta_enabled(header_values: list[str]) -> bool:
    """Whether the ``OpenAI-Beta`` header values (comma-separated features) name this one."""
    return any(part.strip() == BETA_FEATURE for value in header_values for part in value.split(","))


@dataclass(frozen=True)
class Inject:
    """A well-formed inject: the response it names, its input as sent (returned on a
    failure) and as canonical items."""

    response_id: str
    raw_input: Any
    items: tuple[Item, ...]


def parse_inject(body: dict[str, Any], max_input_chars: int, raw_size: int) -> Inject:
    """The inject a frame asks for, or ApiError(400) naming what is wrong."""
    extra = sorted(set(body) - INJECT_FIELDS)
    if extra:
        raise invalid(
            f"Unknown parameter {echo(extra[0])} in response.inject: it takes 'response_id' "
            "and 'input' (the response decides the lane).",
            extra[0],
            "unknown_parameter",
        )
    response_id = body.get("response_id")
    if not isinstance(response_id, str) or not response_id:
        raise invalid(
            "'response_id' must be the id of a response waiting on this connection.",
            "response_id",
            "invalid_value",
        )
    raw = body.get("input")
    if not isinstance(raw, list) or not raw:
        raise invalid("'input' must be a non-empty array of items.", "input", "invalid_value")
    if len(raw) > MAX_INJECT_ITEMS:
        raise invalid(
            f"'input' has {len(raw)} items; an inject takes at most {MAX_INJECT_ITEMS}.",
            "input",
            "array_above_max_length",
        )
    bounds.check_create({"input": raw}, raw_size, max_input_chars)
    items = normalize_input(raw)
    for index, item in enumerate(items):
        kind = item["type"]
        if kind not in OUTPUT_TYPES and not (kind == "message" and item.get("role") == "user"):
            raise invalid(
                f"'input[{index}]' is a {kind!r} item: an inject takes the outputs of the "
                "response's tool calls and user messages.",
                f"input[{index}]",
                "invalid_value",
            )
    return Inject(response_id, raw, tuple(items))


class InjectRefused(Exception):
    """An inject that cannot be committed: ``failed`` event's code, or an ApiError."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class InjectInbox:
    """What a rollout and its connection share: the calls the response waits on, the
    items injects committed since its last step, and a way to put ``inject.created``
    into the response's stream, numbered with its events.

    The rollout ``expect``s each client call as its item ends, and ``take``s the
    committed items once ``ready``; ``close`` ends it (the response decided its ending):
    injects after that are ``response_already_completed``. ``on_ready`` (the engine's
    wake-up) is called when the last awaited output is committed."""

    response_id: str
    closed: bool = False
    _awaited: dict[str, str] = field(default_factory=dict)  # call id -> its output type
    _committed: list[Item] = field(default_factory=list)
    _events: ResponseEvents | None = None
    _emit: Callable[[Event], None] | None = None
    on_ready: Callable[[], None] | None = None

    def attach(self, events: ResponseEvents, emit: Callable[[Event], None]) -> None:
        self._events, self._emit = events, emit

    def expect(self, call_id: str, call_type: str) -> None:
        """A client call ended in the output: its output may now be injected."""
        self._awaited[call_id] = CLIENT_CALLS[call_type][0]

    @property
    def awaited(self) -> int:
        return len(self._awaited)

    @property
    def ready(self) -> bool:
        """Every call of the response has its output: the next step can start."""
        return not self._awaited and bool(self._committed)

    def commit(self, inject: Inject) -> None:
        """Commit every item of ``inject`` or none: InjectRefused for a response that will
        not take it, ApiError for an item that does not fit the response's calls."""
        if self.closed:
            raise InjectRefused(
                "response_already_completed",
                f"Response {self.response_id!r} is not waiting for input any more; send "
                "the items in a response.create continuing it.",
            )
        answered: set[str] = set()
        for index, item in enumerate(inject.items):
            if item["type"] not in OUTPUT_TYPES:
                continue
            call_id = item["call_id"]
            expected = self._awaited.get(call_id)
            if expected is None or call_id in answered:
                raise invalid(
                    f"Response {self.response_id!r} has no unanswered call {call_id!r}.",
                    f"input[{index}].call_id",
                    "invalid_value",
                )
            if item["type"] != expected:
                raise invalid(
                    f"Call {call_id!r} takes a {expected} item.",
                    f"input[{index}].type",
                    "invalid_value",
                )
            answered.add(call_id)
        for call_id in answered:
            del self._awaited[call_id]
        self._committed.extend(as_output(item) for item in inject.items)
        if self._events is not None and self._emit is not None:
            self._emit(self._events.numbered(created(self.response_id)))
        if self.ready and self.on_ready is not None:
            self.on_ready()

    def take(self) -> list[Item]:
        """The items committed since the last step, for the next one."""
        items, self._committed = self._committed, []
        return items

    def close(self) -> None:
        self.closed = True
        self._emit = None


def as_output(item: Item) -> Item:
    """A committed item as it stands in the response's output: with an id and a status."""
    prefix = "msg" if item["type"] == "message" else "fco"
    return {**item, "id": item.get("id") or new_id(prefix), "status": "completed"}


def created(response_id: str) -> Event:
    """``response.inject.created``, without its sequence number (the stream numbers it)."""
    return {"type": "response.inject.created", "response_id": response_id}


def failed(code: str, message: str, *, response_id: Any, raw_input: Any) -> Event:
    """``response.inject.failed``: the uncommitted input returned."""
    return {
        "type": "response.inject.failed",
        "sequence_number": 0,
        "response_id": response_id,
        "input": raw_input,
        "error": {"code": code, "message": message},
    }


def not_enabled(response_id: str) -> ApiError:
    return invalid(
        f"Response {response_id!r} does not take injected input: create it with "
        "multi_agent: {enabled: true} on a connection opened with OpenAI-Beta: "
        f"{BETA_FEATURE}.",
        "response_id",
        "inject_not_enabled",
    )
