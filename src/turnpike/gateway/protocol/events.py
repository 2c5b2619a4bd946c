"""Sans-I/O builder of a response's event stream.

It owns the bookkeeping the clients check: one response id across lifecycle
events, increasing ``sequence_number``, ``output_item.added`` before deltas,
``content_part.added`` before text, matching ``.done`` events, and the full
output in the terminal event. Transports only serialise what it returns.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from turnpike.gateway.protocol.response_object import snapshot
from turnpike.ids import new_id

Event = dict[str, Any]
# The events a call's text streams in: response.<this>.delta and .done.
_CALL_TEXT = {
    "function_call": "function_call_arguments",
    "custom_tool_call": "custom_tool_call_input",
}


class ResponseEvents:
    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response
        self._seq = 0
        self._item: dict[str, Any] | None = None
        self._text: list[str] = []
        self._summary: str | None = None  # the open reasoning item's summary text
        # include reasoning.encrypted_content: reasoning text -> its encrypted_content.
        self.seal_reasoning: Callable[[str], str] | None = None

    def _event(self, kind: str, **fields: Any) -> Event:
        event = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return event

    def numbered(self, event: Event) -> Event:
        """An event the connection adds to the stream (a steer's acceptance), numbered
        in sequence with the response's own."""
        numbered = {**event, "sequence_number": self._seq}
        self._seq += 1
        return numbered

    def _lifecycle(self, kind: str) -> Event:
        return self._event(kind, response=snapshot(self.response))

    # Lifecycle -------------------------------------------------------------
    def created(self) -> Event:
        return self._lifecycle("response.created")

    def in_progress(self) -> Event:
        return self._lifecycle("response.in_progress")

    def completed(self, usage: dict[str, Any]) -> Event:
        self._finish("completed", usage)
        return self._lifecycle("response.completed")

    def incomplete(self, reason: str, usage: dict[str, Any]) -> list[Event]:
        events = self._close_open_item("incomplete")
        self._finish("incomplete", usage)
        self.response["incomplete_details"] = {"reason": reason}
        return [*events, self._lifecycle("response.incomplete")]

    def failed(self, code: str, message: str, usage: dict[str, Any] | None = None) -> list[Event]:
        """Failed; with ``usage`` when the model did its work (it is billed)."""
        events = self._close_open_item("incomplete")
        self._finish("failed", usage)
        self.response["error"] = {"code": code, "message": message}
        return [*events, self._lifecycle("response.failed")]

    def cancelled(self, usage: dict[str, Any]) -> list[Event]:
        """A cancelled background response. The Open Responses spec has no event of its
        own for it: ``response.incomplete`` ends the stream, with status ``cancelled``."""
        events = self._close_open_item("incomplete")
        self._finish("cancelled", usage)
        return [*events, self._lifecycle("response.incomplete")]

    def _finish(self, status: str, usage: dict[str, Any] | None) -> None:
        self.response["status"] = status
        self.response["usage"] = usage
        self.response["completed_at"] = int(time.time())

    # Output items ----------------------------------------------------------
    @property
    def _index(self) -> int:
        return len(self.response["output"]) - 1

    def start_message(self) -> list[Event]:
        item = {
            "id": new_id("msg"),
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        self._open(item)
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return [
            self._event("response.output_item.added", output_index=self._index, item=dict(item)),
            self._event(
                "response.content_part.added",
                item_id=item["id"],
                output_index=self._index,
                content_index=0,
                part=part,
            ),
        ]

    def start_function_call(
        self, call_id: str, name: str, namespace: str | None = None, custom: bool = False
    ) -> list[Event]:
        """A function call (JSON ``arguments``), or a custom tool's (free-form ``input``)."""
        item = {
            "id": new_id("ctc" if custom else "fc"),
            "type": "custom_tool_call" if custom else "function_call",
            "call_id": call_id,
            "name": name,
            "input" if custom else "arguments": "",
            "status": "in_progress",
        }
        if namespace is not None:  # a member of a namespace tool (turnpike.gateway.protocol.tools)
            item["namespace"] = namespace
        self._open(item)
        return [
            self._event("response.output_item.added", output_index=self._index, item=dict(item))
        ]

    def start_reasoning(self) -> list[Event]:
        item = {
            "id": new_id("rs"),
            "type": "reasoning",
            "summary": [],
            "content": [],
            "status": "in_progress",
        }
        self._open(item)
        return [
            self._event("response.output_item.added", output_index=self._index, item=dict(item))
        ]

    def summary(self, text: str) -> list[Event]:
        """The open reasoning item's summary, whole: its part added, then its text."""
        item = self._require_open()
        self._summary = text
        on = self._on(item, self._index)
        return [
            on(
                "response.reasoning_summary_part.added",
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            ),
            on("response.reasoning_summary_text.delta", summary_index=0, delta=text),
        ]

    def add_item(self, item: dict[str, Any]) -> list[Event]:
        """An output item complete from the start (a compaction item): added, then done."""
        self.response["output"].append(item)
        return [
            self._event("response.output_item.added", output_index=self._index, item=dict(item)),
            self._event("response.output_item.done", output_index=self._index, item=dict(item)),
        ]

    def delta(self, text: str) -> Event:
        item = self._require_open()
        self._text.append(text)
        if item["type"] in ("message", "reasoning"):
            kind = "output_text" if item["type"] == "message" else "reasoning_text"
            extra: dict[str, Any] = {"logprobs": []} if item["type"] == "message" else {}
            return self._event(
                f"response.{kind}.delta",
                item_id=item["id"],
                output_index=self._index,
                content_index=0,
                delta=text,
                **extra,
            )
        return self._event(
            f"response.{_CALL_TEXT[item['type']]}.delta",
            item_id=item["id"],
            output_index=self._index,
            delta=text,
        )

    @property
    def open_item_id(self) -> str | None:
        return self._item["id"] if self._item is not None else None

    def extend_delta(self, text: str) -> None:
        """Text merged into an already emitted delta (see event_queue.ResponseEventQueue.merge_delta)."""
        self._require_open()
        self._text.append(text)

    def finish_item(self) -> list[Event]:
        return self._close_open_item("completed")

    def _open(self, item: dict[str, Any]) -> None:
        if self._item is not None:
            raise RuntimeError("an output item is already open")
        self._item = item
        self._text = []
        self._summary = None
        self.response["output"].append(item)

    def _require_open(self) -> dict[str, Any]:
        if self._item is None:
            raise RuntimeError("no output item is open")
        return self._item

    def _close_open_item(self, status: str) -> list[Event]:
        item = self._item
        if item is None:
            return []
        self._item = None
        text = "".join(self._text)
        index = self._index
        item["status"] = status
        if item["type"] == "message":
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            item["content"] = [part]
            events = [
                self._event(
                    "response.output_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                ),
                self._event(
                    "response.content_part.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=dict(part),
                ),
            ]
        elif item["type"] == "reasoning":
            events = self._close_reasoning(item, index, text)
        else:
            field = "input" if item["type"] == "custom_tool_call" else "arguments"
            item[field] = text
            events = [
                self._event(
                    f"response.{_CALL_TEXT[item['type']]}.done",
                    item_id=item["id"],
                    output_index=index,
                    **{field: text},
                )
            ]
        events.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return events

    def _close_reasoning(self, item: dict[str, Any], index: int, text: str) -> list[Event]:
        item["content"] = [{"type": "reasoning_text", "text": text}]
        if self.seal_reasoning is not None:
            item["encrypted_content"] = self.seal_reasoning(text)
        on = self._on(item, index)
        events = [on("response.reasoning_text.done", content_index=0, text=text)]
        if self._summary is not None:
            part = {"type": "summary_text", "text": self._summary}
            item["summary"] = [part]
            events += [
                on("response.reasoning_summary_text.done", summary_index=0, text=self._summary),
                on("response.reasoning_summary_part.done", summary_index=0, part=dict(part)),
            ]
        return events

    def _on(self, item: dict[str, Any], index: int) -> Callable[..., Event]:
        """An event builder for one output item's events."""
        return lambda kind, **fields: self._event(
            kind, item_id=item["id"], output_index=index, **fields
        )
