"""Pure mapping of an OpenAI-compatible chat completions stream back to Inference events
(the request is mapped by ``chat_request``). No I/O.

Stream (``ChunkMapper``), one chunk (a ``chat.completion.chunk`` as a dict) at a time:

- ``delta.content`` -> a MESSAGE item: ItemStarted on the first content, one Delta per
  chunk;
- ``delta.tool_calls`` (by ``index``; an index's first fragment carries ``id`` and
  ``function.name``, later ones argument text) -> one FUNCTION_CALL item per index:
  ItemStarted(call_id, name), a Delta per argument fragment, ItemDone when another item
  starts or the stream ends. A custom tool's call is held until it ends, then its
  ``input`` is given as one Delta (arguments that are not ``{"input": string}`` are given
  as they came). Calls must arrive one index after another (as OpenAI
  streams them; Cerebras sends each call whole): a fragment for a call already closed
  is a protocol error;
- ``delta.reasoning`` (gpt-oss on Cerebras; ``reasoning_content`` elsewhere) -> a
  REASONING item, as ``delta.content`` a MESSAGE item; its Delta tokens are the
  reasoning tokens unless ``usage.completion_tokens_details.reasoning_tokens`` says;
- Delta tokens: ``len(delta.tokens)`` when the backend sends token ids, else 1 per
  chunk (given to the chunk's first Delta). Only the final ``usage`` is exact; the
  Finished event carries it;
- ``finish_reason``: stop, tool_calls, length as is; ``content_filter`` -> ``stop``
  (the contract has no such reason; the output simply ends); ``stop`` after function
  calls -> ``tool_calls``;
- ``usage`` (on the final chunk): prompt_tokens, completion_tokens,
  prompt_tokens_details.cached_tokens; without usage, the rendered prompt's length (+
  image tokens) and the Delta token sum stand in.
"""

from __future__ import annotations

import json
from typing import Any

from turnpike import custom_tools, ids
from turnpike.inference.v1 import inference_pb2 as pb

FINISH_REASONS = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "content_filter": "stop",
}


class StreamProtocolError(Exception):
    """The backend's stream broke the chat completion streaming format."""


class ChunkMapper:
    """Chunks in, contract events out. ``feed`` each chunk, then ``finish`` (a complete
    stream) or ``abort`` (a broken one: closes the open item)."""

    def __init__(
        self,
        fallback_input_tokens: int = 0,
        max_tool_calls: int | None = None,
        custom_tool_names: frozenset[str] = frozenset(),
    ) -> None:
        self.fallback_input_tokens = fallback_input_tokens
        self.custom_tool_names = custom_tool_names
        # The open custom call's argument text and tokens, held until it ends.
        self._custom_call: list[str] | None = None
        self._custom_tokens = 0
        # Chat completions has no call limit: calls past it are dropped here.
        self.max_tool_calls = max_tool_calls
        self._dropped_calls: set[int] = set()
        self.emitted = False  # any event out yet (after that, no silent retry)
        self.delta_tokens = 0
        self.reasoning_delta_tokens = 0
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self._open: str | None = None  # "message" | "reasoning" | "call"
        self._call_index: int | None = None
        self._closed_calls: set[int] = set()
        self._calls = 0

    def feed(self, chunk: dict[str, Any]) -> list[pb.GenerateEvent]:
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        events: list[pb.GenerateEvent] = []
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue  # one completion is requested (n=1)
            delta = choice.get("delta") or {}
            token_ids = delta.get("tokens") or choice.get("tokens")
            tokens = [len(token_ids) if token_ids else 1]  # for the chunk's first Delta

            reasoning = delta.get("reasoning") or delta.get("reasoning_content")
            if reasoning:
                before = self.delta_tokens
                events += self._text(reasoning, tokens, "reasoning", pb.ItemStarted.REASONING)
                self.reasoning_delta_tokens += self.delta_tokens - before
            content = delta.get("content")
            if content:
                events += self._text(content, tokens, "message", pb.ItemStarted.MESSAGE)
            for call in delta.get("tool_calls") or ():
                events += self._call_fragment(call, tokens)

            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        self.emitted = self.emitted or bool(events)
        return events

    def _text(
        self, text: str, tokens: list[int], kind: str, started: pb.ItemStarted.Kind
    ) -> list[pb.GenerateEvent]:
        """A text Delta of a message or reasoning item, starting the item if need be."""
        events: list[pb.GenerateEvent] = []
        if self._open != kind:
            events += self._close()
            events.append(_started(pb.ItemStarted(kind=started)))
            self._open = kind
        events.append(self._delta(text, tokens))
        return events

    def _call_fragment(self, call: dict[str, Any], tokens: list[int]) -> list[pb.GenerateEvent]:
        events: list[pb.GenerateEvent] = []
        index = call.get("index")
        if index is None:
            # Tolerated though not the format: an id starts a new call, else it continues.
            fresh = call.get("id") or self._open != "call"
            if fresh:
                index = -1 - self._calls
            else:
                assert self._call_index is not None  # an open call has its index
                index = self._call_index
        function = call.get("function") or {}
        if index in self._dropped_calls:
            return events
        if self._open != "call" or index != self._call_index:
            if self.max_tool_calls is not None and self._calls >= self.max_tool_calls:
                self._dropped_calls.add(index)
                return events
            if index in self._closed_calls:
                raise StreamProtocolError(f"tool call {index} continued after another item began")
            name = function.get("name")
            if not name:
                raise StreamProtocolError(f"tool call {index} started without a function name")
            events += self._close()
            call_id = call.get("id") or ids.new_id("call")
            custom = name in self.custom_tool_names
            started = pb.ItemStarted(
                kind=pb.ItemStarted.FUNCTION_CALL, call_id=call_id, name=name, custom=custom
            )
            events.append(_started(started))
            self._open, self._call_index = "call", index
            self._custom_call = [] if custom else None
            self._calls += 1
        arguments = function.get("arguments")
        if arguments and self._custom_call is not None:
            self._custom_call.append(arguments)
            self._custom_tokens += tokens[0]
            self.delta_tokens += tokens[0]
            tokens[0] = 0
        elif arguments:
            events.append(self._delta(arguments, tokens))
        return events

    def _custom_input(self) -> list[pb.GenerateEvent]:
        """The held custom call's input, as one Delta."""
        held, self._custom_call = self._custom_call or [], None
        text = "".join(held)
        try:
            decoded = json.loads(text)
        except json.JSONDecodeError:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get(custom_tools.INPUT_PARAMETER), str):
            text = decoded[custom_tools.INPUT_PARAMETER]
        count, self._custom_tokens = self._custom_tokens, 0
        return [pb.GenerateEvent(delta=pb.Delta(text=text, tokens=count))] if text else []

    def _delta(self, text: str, tokens: list[int]) -> pb.GenerateEvent:
        count, tokens[0] = tokens[0], 0
        self.delta_tokens += count
        return pb.GenerateEvent(delta=pb.Delta(text=text, tokens=count))

    def _close(self) -> list[pb.GenerateEvent]:
        if self._open is None:
            return []
        events = self._custom_input() if self._custom_call is not None else []
        if self._open == "call" and self._call_index is not None:
            self._closed_calls.add(self._call_index)
        self._open, self._call_index = None, None
        return [*events, pb.GenerateEvent(item_done=pb.ItemDone())]

    def abort(self) -> list[pb.GenerateEvent]:
        """Close whatever item is open (the stream broke)."""
        return self._close()

    def finish(self) -> tuple[list[pb.GenerateEvent], str, pb.Usage]:
        """Close the open item; the contract's finish reason and usage. Raises
        ``StreamProtocolError`` when the stream ended without a finish reason."""
        if self.finish_reason is None:
            raise StreamProtocolError("the stream ended without a finish reason")
        reason = FINISH_REASONS.get(self.finish_reason)
        if reason is None:
            raise StreamProtocolError(f"unknown finish reason {self.finish_reason!r}")
        if reason == "stop" and self._calls:
            reason = "tool_calls"
        return self._close(), reason, self._usage()

    def _usage(self) -> pb.Usage:
        usage = self.usage or {}
        details = usage.get("prompt_tokens_details") or {}
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        return pb.Usage(
            input_tokens=self.fallback_input_tokens if prompt is None else int(prompt),
            cached_tokens=int(details.get("cached_tokens") or 0),
            output_tokens=self.delta_tokens if completion is None else int(completion),
            reasoning_tokens=int(
                (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
                or self.reasoning_delta_tokens
            ),
        )


def _started(started: pb.ItemStarted) -> pb.GenerateEvent:
    return pb.GenerateEvent(item_started=started)
