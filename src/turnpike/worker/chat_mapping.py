"""Pure mapping between the Inference contract and an OpenAI-compatible chat completions
API (``/v1/chat/completions``: Cerebras, vLLM, SGLang, llama.cpp's server): requests
out, streamed chunks back. No I/O.

Request (``chat_params``):

- ``instructions`` -> a leading ``system`` message;
- MESSAGE items keep their role, except ``developer`` -> ``system``: the chat API has
  no developer role everywhere (Cerebras has none); system messages act at that level;
- input images of a message -> ``image_url`` content parts beside its text (images given
  only by ``file_id`` cannot be forwarded and are rejected);
- a run of consecutive FUNCTION_CALL items -> ONE assistant message with ``tool_calls``;
  a run right after an assistant text message joins that message (content + tool_calls
  is how the model produced them: one turn);
- FUNCTION_CALL_OUTPUT -> ``{"role": "tool", "tool_call_id", "content"}``;
- custom tools (free-form input; chat completions servers such as vLLM and llama.cpp
  take function tools only) -> a function whose one ``input`` string parameter is the
  input, its format told in the parameter's description (``turnpike.custom_tools``): the
  grammar is described, not enforced. A custom call in the history is sent as that
  function's call, ``{"input": ...}``;
- tools -> ``{"type": "function", "function": {name, description?, parameters?,
  strict?}}``; ``tool_choice`` auto | none | required, or a function name ->
  ``{"type": "function", "function": {"name"}}``; both only when there are tools;
- ``text_format`` (structured outputs) -> ``response_format``: ``json_schema`` ->
  ``{"type": "json_schema", "json_schema": {name, description?, schema, strict}}``,
  ``json_object`` -> ``{"type": "json_object"}``; plain text sends none;
- sampling: ``temperature`` always (the gateway always sets it; 0 is greedy), ``top_p``,
  ``seed`` and ``max_completion_tokens`` only when non-zero (0 means unset there);
- ``reasoning_effort``: the request's effort, when it asks for one (minimal -> low,
  xhigh -> high: the chat API's values are low, medium and high).

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
from collections.abc import Iterable, Sequence
from typing import Any

from turnpike import custom_tools, ids
from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.inference.v1 import inference_pb2 as pb

MESSAGE_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}
TOOL_CHOICE_MODES = ("auto", "none", "required")
FINISH_REASONS = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "content_filter": "stop",
}


CHAT_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}


class MappingError(ValueError):
    """The request cannot be expressed as a chat completion request."""


class StreamProtocolError(Exception):
    """The backend's stream broke the chat completion streaming format."""


# ---- request ---------------------------------------------------------------------


def chat_messages(instructions: str, items: Iterable[cv.Item]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    # The assistant message the current run of FUNCTION_CALL items belongs to.
    calls_target: dict[str, Any] | None = None
    for position, item in enumerate(items):
        where = f"items[{position}]"
        if item.kind == cv.Item.FUNCTION_CALL:
            if not item.call_id or not item.name:
                raise MappingError(f"{where}: a function call needs call_id and name")
            if calls_target is None:
                calls_target = {"role": "assistant"}
                messages.append(calls_target)
            arguments = item.arguments or "{}"
            if item.custom:
                arguments = json.dumps({custom_tools.INPUT_PARAMETER: item.arguments})
            calls_target.setdefault("tool_calls", []).append(
                {
                    "id": item.call_id,
                    "type": "function",
                    "function": {"name": item.name, "arguments": arguments},
                }
            )
            continue
        calls_target = None
        if item.kind == cv.Item.MESSAGE:
            role = MESSAGE_ROLES.get(item.role)
            if role is None:
                raise MappingError(f"{where}: unsupported message role {item.role!r}")
            message: dict[str, Any] = {"role": role, "content": _content(item, where)}
            messages.append(message)
            if role == "assistant":
                calls_target = message
        elif item.kind == cv.Item.FUNCTION_CALL_OUTPUT:
            if not item.call_id:
                raise MappingError(f"{where}: a function call output needs call_id")
            if item.images:
                raise MappingError(f"{where}: images in a function call output are not supported")
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text})
        else:
            raise MappingError(f"{where}: unsupported item kind {item.kind}")
    return messages


def _content(item: cv.Item, where: str) -> str | list[dict[str, Any]]:
    if not item.images:
        return item.text
    if item.role == "assistant":
        raise MappingError(f"{where}: images in an assistant message are not supported")
    parts: list[dict[str, Any]] = []
    if item.text:
        parts.append({"type": "text", "text": item.text})
    for image in item.images:
        if not image.url:
            raise MappingError(
                f"{where}: an input image given only by file_id cannot be sent to this backend"
            )
        image_url = {"url": image.url}
        if image.detail:
            image_url["detail"] = image.detail
        parts.append({"type": "image_url", "image_url": image_url})
    return parts


def chat_tools(tools: Iterable[cv.Tool]) -> list[dict[str, Any]]:
    out = []
    for tool in tools:
        function: dict[str, Any] = {"name": tool.name}
        if tool.description:
            function["description"] = tool.description
        if tool.custom:
            parameters = custom_tools.as_function_parameters(tool.description, tool.format_json)
            out.append({"type": "function", "function": {**function, "parameters": parameters}})
            continue
        if tool.parameters_json:
            try:
                function["parameters"] = json.loads(tool.parameters_json)
            except json.JSONDecodeError as exc:
                raise MappingError(f"tool {tool.name!r}: parameters are not JSON: {exc}") from exc
        if tool.strict:
            function["strict"] = True
        out.append({"type": "function", "function": function})
    return out


def chat_tool_choice(choice: str, tool_names: Sequence[str]) -> str | dict[str, Any] | None:
    """None means: leave it to the API (auto when there are tools)."""
    if not choice:
        return None
    if choice in TOOL_CHOICE_MODES:
        return choice
    if choice not in tool_names:
        raise MappingError(f"tool_choice {choice!r} is not among the tools")
    return {"type": "function", "function": {"name": choice}}


def chat_response_format(text_format: pb.TextFormat) -> dict[str, Any] | None:
    """None means plain text (the API's default: nothing to send)."""
    if text_format.type in ("", "text"):
        return None
    if text_format.type == "json_object":
        return {"type": "json_object"}
    if text_format.type != "json_schema":
        raise MappingError(f"unsupported text format {text_format.type!r}")
    if not text_format.name:
        raise MappingError("a json_schema text format needs a name")
    try:
        schema = json.loads(text_format.schema_json) if text_format.schema_json else {}
    except json.JSONDecodeError as exc:
        raise MappingError(f"text format {text_format.name!r}: schema is not JSON: {exc}") from exc
    json_schema: dict[str, Any] = {"name": text_format.name}
    if text_format.description:
        json_schema["description"] = text_format.description
    json_schema["schema"] = schema
    json_schema["strict"] = text_format.strict
    return {"type": "json_schema", "json_schema": json_schema}


def call_limit(request: pb.GenerateRequest) -> int | None:
    """The most function calls the response may hold (None: no limit): ``max_tool_calls``,
    and one when ``parallel_tool_calls`` is off (a hosted model may not heed either)."""
    limit = request.max_tool_calls if request.HasField("max_tool_calls") else None
    if request.tools and not request.parallel_tool_calls:
        limit = 1 if limit is None else min(limit, 1)
    return limit


def chat_params(request: pb.GenerateRequest) -> dict[str, Any]:
    """Keyword arguments of ``chat.completions.create`` (without ``stream``)."""
    if not request.model:
        raise MappingError("model is required")
    params: dict[str, Any] = {
        "model": request.model,
        "messages": chat_messages(request.instructions, request.items),
    }
    if not params["messages"]:
        raise MappingError("the conversation has no messages")
    if request.tools:
        params["tools"] = chat_tools(request.tools)
        choice = chat_tool_choice(request.tool_choice, [t.name for t in request.tools])
        limit = request.max_tool_calls if request.HasField("max_tool_calls") else None
        # Chat completions has no max_tool_calls: 0 allows no call, 1 one call at a time.
        if limit == 0:
            choice = "none"
        if choice is not None:
            params["tool_choice"] = choice
        params["parallel_tool_calls"] = request.parallel_tool_calls and limit != 1
    response_format = chat_response_format(request.text_format)
    if response_format is not None:
        params["response_format"] = response_format
    sampling = request.sampling
    if sampling.max_output_tokens < 0:
        raise MappingError("sampling.max_output_tokens must be >= 0")
    params["temperature"] = sampling.temperature
    if sampling.top_p:
        params["top_p"] = sampling.top_p
    if sampling.seed:
        params["seed"] = sampling.seed
    for penalty in ("presence_penalty", "frequency_penalty"):
        if value := getattr(sampling, penalty):
            params[penalty] = value
    if sampling.max_output_tokens:
        params["max_completion_tokens"] = sampling.max_output_tokens
    effort = CHAT_EFFORTS.get(request.reasoning_effort)
    if effort is not None:
        params["reasoning_effort"] = effort
    return params


# ---- stream ------------------------------------------------------------------------


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
