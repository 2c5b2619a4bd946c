"""Pure mapping of an Inference ``GenerateRequest`` to an OpenAI-compatible chat completions
request (``/v1/chat/completions``: Cerebras, vLLM, SGLang, llama.cpp's server). No I/O.
The stream back is mapped by ``chat_stream``.

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
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from turnpike import custom_tools
from turnpike.conversation.v1 import conversation_pb2 as cv
from turnpike.inference.v1 import inference_pb2 as pb

MESSAGE_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}
TOOL_CHOICE_MODES = ("auto", "none", "required")
CHAT_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "high"}


class MappingError(ValueError):
    """The request cannot be expressed as a chat completion request."""


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
