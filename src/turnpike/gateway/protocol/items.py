"""Input items: accept every shape the official clients send, store one canonical shape.

Canonical items are what ``input_items`` lists and what a follow-up's history
holds: each has an ``id`` and a ``status``. ``to_proto`` flattens them into the
``conversation.v1.Item`` the backends work with. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from turnpike.conversation.v1 import conversation_pb2
from turnpike.gateway.protocol import input_files
from turnpike.gateway.protocol.errors import invalid, invalid_type, missing, require_str
from turnpike.ids import new_id

Item = dict[str, Any]

MESSAGE_ROLES = ("user", "assistant", "system", "developer")
TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
# Longest function name of a function_call item (a tool's is 64 characters). Every output
# answering the call carries the name to the backends (``to_proto``): unbounded, one long
# name and many small outputs made a message hundreds of times the request's size.
MAX_FUNCTION_NAME_CHARS = 256


def normalize_input(raw: Any, param: str = "input", *, triggers: bool = False) -> list[Item]:
    """The request's ``input`` (a string or a list of items) as canonical items.
    ``compaction_trigger`` items are taken only where ``triggers`` (a create's input;
    ``turnpike.gateway.protocol.compaction_trigger.take_trigger`` removes them): elsewhere they are unsupported."""
    if raw is None:
        return []
    if isinstance(raw, str):
        return [_message("user", [{"type": "input_text", "text": raw}])]
    if not isinstance(raw, list):
        raise invalid_type(param, "a string or an array of input items")
    return [normalize_item(item, f"{param}[{i}]", triggers) for i, item in enumerate(raw)]


def normalize_item(raw: Any, param: str, triggers: bool = False) -> Item:
    if not isinstance(raw, dict):
        raise invalid_type(param, "an object")
    kind = raw.get("type", "message" if "role" in raw else None)
    if kind == "compaction_trigger" and triggers:
        item_id = raw.get("id")
        if item_id is not None and not isinstance(item_id, str):
            raise invalid_type(f"{param}.id", "a string")
        return {"id": item_id or new_id("cmpt"), "type": "compaction_trigger"}
    if kind == "message":
        return _normalize_message(raw, param)
    if kind == "function_call":
        return _normalize_function_call(raw, param)
    if kind == "function_call_output":
        return _normalize_function_call_output(raw, param)
    if kind == "custom_tool_call":
        return _normalize_custom_tool_call(raw, param)
    if kind == "custom_tool_call_output":
        return _normalize_call_output(raw, param, "custom_tool_call_output", "ctco")
    if kind == "reasoning":
        return _normalize_reasoning(raw, param)
    if (
        kind == "compaction"
    ):  # expanded by turnpike.gateway.sealed.compaction before anything renders it
        item_id = raw.get("id")
        if item_id is not None and not isinstance(item_id, str):
            raise invalid_type(f"{param}.id", "a string")
        content = require_str(raw, "encrypted_content", param)
        return {"id": item_id or new_id("cmp"), "type": "compaction", "encrypted_content": content}
    if kind is None:
        raise missing(f"{param}.type")
    if not isinstance(kind, str):
        raise invalid_type(f"{param}.type", "a string")
    raise invalid(
        f"Input items of type '{kind}' are not supported by this server.",
        f"{param}.type",
        "unsupported_item_type",
    )


def _message(role: str, content: list[dict[str, Any]], item_id: str | None = None) -> Item:
    return {
        "id": item_id or new_id("msg"),
        "type": "message",
        "role": role,
        "content": content,
        "status": "completed",
    }


def _normalize_message(raw: dict[str, Any], param: str) -> Item:
    role = raw.get("role")
    if role not in MESSAGE_ROLES:
        if not isinstance(role, str):
            raise invalid_type(f"{param}.role", "one of " + ", ".join(MESSAGE_ROLES))
        raise invalid(
            f"Invalid value for '{param}.role': '{role}'. Supported values are: "
            + ", ".join(f"'{r}'" for r in MESSAGE_ROLES)
            + ".",
            f"{param}.role",
            "invalid_value",
        )
    content = raw.get("content")
    if isinstance(content, str):
        part_type = "output_text" if role == "assistant" else "input_text"
        parts = [_part({"type": part_type, "text": content}, role, f"{param}.content")]
    elif isinstance(content, list):
        parts = [_part(p, role, f"{param}.content[{i}]") for i, p in enumerate(content)]
    elif content is None:
        raise missing(f"{param}.content")
    else:
        raise invalid_type(f"{param}.content", "a string or an array of content parts")
    item_id = raw.get("id")
    if item_id is not None and not isinstance(item_id, str):
        raise invalid_type(f"{param}.id", "a string")
    return _message(role, parts, item_id)


def _part(raw: Any, role: str, param: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise invalid_type(param, "a content part object")
    kind = raw.get("type")
    if kind in ("input_text", "output_text"):
        text = raw.get("text")
        if not isinstance(text, str):
            raise invalid_type(f"{param}.text", "a string")
        if kind == "output_text" or role == "assistant":
            return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        return {"type": "input_text", "text": text}
    if kind == "refusal":
        refusal = raw.get("refusal")
        if not isinstance(refusal, str):
            raise invalid_type(f"{param}.refusal", "a string")
        return {"type": "refusal", "refusal": refusal}
    if kind == "input_image":
        image_url, file_id = raw.get("image_url"), raw.get("file_id")
        if image_url is None and file_id is None:
            raise invalid(
                f"'{param}' needs 'image_url' or 'file_id'.",
                f"{param}.image_url",
                "missing_required_parameter",
            )
        for name, value in (("image_url", image_url), ("file_id", file_id)):
            if value is not None and not isinstance(value, str):
                raise invalid_type(f"{param}.{name}", "a string")
        detail = raw.get("detail", "auto")
        if detail not in ("low", "high", "auto"):
            raise invalid(
                f"Invalid value for '{param}.detail': expected 'low', 'high' or 'auto'.",
                f"{param}.detail",
                "invalid_value",
            )
        return {"type": "input_image", "image_url": image_url, "file_id": file_id, "detail": detail}
    if kind == "input_file":
        if "text" in raw and "file_data" not in raw:  # canonical: from the store, or re-sent
            if not isinstance(raw["text"], str):
                raise invalid_type(f"{param}.text", "a string")
            filename = raw.get("filename")
            return {
                "type": "input_file",
                "filename": filename if isinstance(filename, str) else "file",
                "text": raw["text"],
            }
        return input_files.normalize_file_part(raw, param)
    if not isinstance(kind, str):
        raise invalid_type(f"{param}.type", "a string")
    raise invalid(
        f"Content parts of type '{kind}' are not supported by this server.",
        f"{param}.type",
        "unsupported_content_type",
    )


def _normalize_function_call(raw: dict[str, Any], param: str) -> Item:
    call = _call(raw, param, "function_call", "fc")
    call["arguments"] = require_str(raw, "arguments", param)
    return _with_namespace(call, raw, param)


def _normalize_custom_tool_call(raw: dict[str, Any], param: str) -> Item:
    call = _call(raw, param, "custom_tool_call", "ctc")
    call["input"] = require_str(raw, "input", param)
    return _with_namespace(call, raw, param)


def _call(raw: dict[str, Any], param: str, kind: str, prefix: str) -> Item:
    """A tool call's common fields: ``id``, ``call_id``, a bounded ``name``."""
    call_id = require_str(raw, "call_id", param)
    name = require_str(raw, "name", param)
    if len(name) > MAX_FUNCTION_NAME_CHARS:
        raise invalid(
            f"Invalid '{param}.name': a tool name is at most {MAX_FUNCTION_NAME_CHARS} characters.",
            f"{param}.name",
            "invalid_value",
        )
    item_id = raw.get("id")
    if item_id is not None and not isinstance(item_id, str):
        raise invalid_type(f"{param}.id", "a string")
    return {
        "id": item_id or new_id(prefix),
        "type": kind,
        "call_id": call_id,
        "name": name,
        "status": "completed",
    }


def _with_namespace(call: Item, raw: dict[str, Any], param: str) -> Item:
    namespace = raw.get("namespace")
    if (
        namespace is not None
    ):  # a call of a namespace tool's member (turnpike.gateway.protocol.tools)
        if not isinstance(namespace, str) or len(namespace) > MAX_FUNCTION_NAME_CHARS:
            raise invalid_type(f"{param}.namespace", "a namespace name")
        call["namespace"] = namespace
    return call


def _normalize_function_call_output(raw: dict[str, Any], param: str) -> Item:
    return _normalize_call_output(raw, param, "function_call_output", "fco")


def _normalize_call_output(raw: dict[str, Any], param: str, kind: str, prefix: str) -> Item:
    call_id = require_str(raw, "call_id", param)
    output = raw.get("output")
    if isinstance(output, list):
        output = [_part(p, "user", f"{param}.output[{i}]") for i, p in enumerate(output)]
    elif not isinstance(output, str):
        if output is None:
            raise missing(f"{param}.output")
        raise invalid_type(f"{param}.output", "a string or an array of content parts")
    item_id = raw.get("id")
    if item_id is not None and not isinstance(item_id, str):
        raise invalid_type(f"{param}.id", "a string")
    return {
        "id": item_id or new_id(prefix),
        "type": kind,
        "call_id": call_id,
        "output": output,
        "status": "completed",
    }


def _normalize_reasoning(raw: dict[str, Any], param: str) -> Item:
    summary = raw.get("summary", [])
    if not isinstance(summary, list):
        raise invalid_type(f"{param}.summary", "an array")
    item = {"id": raw.get("id") or new_id("rs"), "type": "reasoning", "summary": summary}
    if isinstance(raw.get("encrypted_content"), str):
        item["encrypted_content"] = raw["encrypted_content"]
    return item


# Each kind of tool output, and the kind of call it answers.
OUTPUT_OF = {"function_call_output": "function_call", "custom_tool_call_output": "custom_tool_call"}
CALLS = frozenset(OUTPUT_OF.values())


def check_call_outputs(
    history: Iterable[Item], new_items: list[Item], param: str = "input"
) -> None:
    """Every tool output must answer a call of its kind seen before it."""
    known = {(item["type"], item["call_id"]) for item in history if item["type"] in CALLS}
    for i, item in enumerate(new_items):
        if item["type"] in CALLS:
            known.add((item["type"], item["call_id"]))
        elif item["type"] in OUTPUT_OF and (OUTPUT_OF[item["type"]], item["call_id"]) not in known:
            what = "function" if item["type"] == "function_call_output" else "custom tool"
            raise invalid(
                f"No tool call found for {what} call output with call_id {item['call_id']}.",
                f"{param}[{i}].call_id",
                "invalid_function_call_output",
            )


def text_of(content: Any) -> str:
    """The text of a message's content or a tool output, parts joined by newlines."""
    if isinstance(content, str):
        return content
    texts = []
    for part in content or []:
        if part.get("type") == "input_file":
            texts.append(input_files.rendered(part))
        elif part.get("type") in TEXT_PARTS:
            texts.append(part.get("text", ""))
        elif part.get("type") == "refusal":
            texts.append(part.get("refusal", ""))
    return "\n".join(texts)


def images_of(content: Any) -> list[conversation_pb2.Image]:
    if isinstance(content, str):
        return []
    return [
        conversation_pb2.Image(
            url=part.get("image_url") or "",
            file_id=part.get("file_id") or "",
            detail=part["detail"],
        )
        for part in content or []
        if part.get("type") == "input_image"
    ]


def to_proto(items: Iterable[Item], call_names: dict[str, str]) -> list[conversation_pb2.Item]:
    """Flatten canonical items for the backends. ``call_names`` maps call ids to the
    function names, so a tool output knows which function it answers; it is
    updated with the calls found in ``items``. Reasoning items carry nothing to render."""
    Kind = conversation_pb2.Item.Kind
    out = []
    for item in items:
        kind = item["type"]
        if kind == "message":
            out.append(
                conversation_pb2.Item(
                    kind=Kind.MESSAGE,
                    id=item["id"],
                    role=item["role"],
                    text=text_of(item["content"]),
                    images=images_of(item["content"]),
                )
            )
        elif kind == "function_call":
            call_names[item["call_id"]] = item["name"]
            out.append(
                conversation_pb2.Item(
                    kind=Kind.FUNCTION_CALL,
                    id=item["id"],
                    call_id=item["call_id"],
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
        elif kind == "custom_tool_call":
            call_names[item["call_id"]] = item["name"]
            out.append(
                conversation_pb2.Item(
                    kind=Kind.FUNCTION_CALL,
                    custom=True,
                    id=item["id"],
                    call_id=item["call_id"],
                    name=item["name"],
                    arguments=item["input"],
                )
            )
        elif kind in OUTPUT_OF:
            out.append(
                conversation_pb2.Item(
                    kind=Kind.FUNCTION_CALL_OUTPUT,
                    custom=kind == "custom_tool_call_output",
                    id=item["id"],
                    call_id=item["call_id"],
                    name=call_names.get(item["call_id"], ""),
                    text=text_of(item["output"]),
                    images=images_of(item["output"]),
                )
            )
    return out
