"""The official openai SDK's objects as tests read them. The SDK types an item, a content
part or an event as a union of every kind the API has, and ``usage`` as optional; these
helpers assert the kind a test expects (a failed assertion names what came instead) and
return it typed, so a test reads ``text_of(item)`` rather than narrowing it first."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from openai.resources.responses.responses import ResponsesConnection
from openai.types.conversations import ConversationItem
from openai.types.conversations import Message as ConversationMessage
from openai.types.responses import (
    Response,
    ResponseInputItemParam,
    ResponseInputMessageItem,
    ResponseInputText,
    ResponseItem,
    ResponseOutputItem,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponsesServerEvent,
    ResponseUsage,
)
from pydantic import BaseModel
from support.wire import TERMINAL

# An item wherever the API lists one: a conversation's items, a response's input items
# (GET /responses/{id}/input_items) or its output; and a message among them.
AnyItem = ConversationItem | ResponseItem | ResponseOutputItem
MessageItem = ConversationMessage | ResponseInputMessageItem | ResponseOutputMessage


def user(text: str) -> ResponseInputItemParam:
    """A user message as an input item."""
    return {"type": "message", "role": "user", "content": text}


def message(item: AnyItem) -> MessageItem:
    """The item, which must be a message (its role, content and status)."""
    assert isinstance(item, MessageItem), item
    return item


def text_of(item: AnyItem) -> str:
    """The text of a message item's first content part (input or output text)."""
    part = message(item).content[0]
    assert isinstance(part, ResponseInputText | ResponseOutputText), part
    return part.text


def response_usage(response: Response) -> ResponseUsage:
    """A finished response's usage (the SDK's type allows none)."""
    assert response.usage is not None, response
    return response.usage


def turnpike_fields(response: Response) -> dict[str, Any]:
    """The gateway's own object in a response (``turnpike``: the worker, the pipeline,
    the overhead...), which the SDK keeps among the fields it does not know."""
    assert response.model_extra is not None and "turnpike" in response.model_extra, response
    return response.model_extra["turnpike"]


def sent_back(items: Iterable[BaseModel]) -> list[dict[str, Any]]:
    """Items the API returned (a response's output, a compaction's, a page of input
    items) as the JSON a stateless client sends back."""
    return [item.model_dump(exclude_none=True, warnings=False) for item in items]


def as_input(items: Iterable[Mapping[str, Any]]) -> list[ResponseInputItemParam]:
    """JSON items as the SDK's ``input``. The SDK sends them as they are; its TypedDicts
    only describe them, and to mypy a dict read back from the API is none of them."""
    return cast(list[ResponseInputItemParam], list(items))


def ws_turn(conn: ResponsesConnection, **create: Any) -> ResponsesServerEvent:
    """Send ``response.create`` with ``create``; the event that ends the turn."""
    conn.response.create(**create)
    for event in conn:
        if event.type in TERMINAL:
            return event
    raise AssertionError("the socket closed")
