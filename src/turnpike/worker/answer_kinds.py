"""What the simulator answers (``turnpike.worker.answers``): a message or a function call,
or an ``AnswerError`` for a request it cannot answer as given."""

from __future__ import annotations

from dataclasses import dataclass


class AnswerError(ValueError):
    """The request cannot be answered as given (a client error)."""


@dataclass(frozen=True)
class MessageAnswer:
    text: str


@dataclass(frozen=True)
class FunctionCallAnswer:
    name: str
    arguments: str  # JSON text; a custom tool's free-form input
    custom: bool = False


Answer = MessageAnswer | FunctionCallAnswer
