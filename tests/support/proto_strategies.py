"""Hypothesis strategies for any protobuf message, from its descriptor: every field
optional, scalars over their whole range, enums as known values or any int32 (proto3
enums are open: an unknown number is kept, so a server must handle it), strings without
lone surrogates (protobuf cannot encode them), nested messages to a bounded depth, and
repeated fields short, or ``oversized`` (one element many times: a long history)."""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

F = FieldDescriptor
INT_RANGES = {
    F.TYPE_INT32: (-(2**31), 2**31 - 1),
    F.TYPE_SINT32: (-(2**31), 2**31 - 1),
    F.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    F.TYPE_INT64: (-(2**63), 2**63 - 1),
    F.TYPE_SINT64: (-(2**63), 2**63 - 1),
    F.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    F.TYPE_UINT32: (0, 2**32 - 1),
    F.TYPE_FIXED32: (0, 2**32 - 1),
    F.TYPE_UINT64: (0, 2**64 - 1),
    F.TYPE_FIXED64: (0, 2**64 - 1),
}
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=64)
MAX_DEPTH = 3


def _scalar(field: FieldDescriptor) -> st.SearchStrategy[Any]:
    if field.type in INT_RANGES:
        low, high = INT_RANGES[field.type]
        # Small values reach the code behind the bounds checks; extremes test them.
        return st.integers(-3, 1000).filter(lambda v: low <= v <= high) | st.integers(low, high)
    if field.type == F.TYPE_DOUBLE:
        return st.floats()
    if field.type == F.TYPE_FLOAT:
        return st.floats(width=32)
    if field.type == F.TYPE_BOOL:
        return st.booleans()
    if field.type == F.TYPE_STRING:
        return TEXT
    if field.type == F.TYPE_BYTES:
        return st.binary(max_size=256)
    if field.type == F.TYPE_ENUM:
        known = [value.number for value in field.enum_type.values]
        return st.sampled_from(known) | st.integers(-(2**31), 2**31 - 1)
    raise TypeError(f"no strategy for field type {field.type}")


def _value(field: FieldDescriptor, depth: int, oversized: bool) -> st.SearchStrategy[Any]:
    if field.type == F.TYPE_MESSAGE:
        return messages(field.message_type, depth + 1, oversized)
    return _scalar(field)


def _is_map(field: FieldDescriptor) -> bool:
    return field.type == F.TYPE_MESSAGE and field.message_type.GetOptions().map_entry


def _repeated(field: FieldDescriptor, depth: int, oversized: bool) -> st.SearchStrategy[Any]:
    if _is_map(field):
        key, value = (
            field.message_type.fields_by_name["key"],
            field.message_type.fields_by_name["value"],
        )
        return st.dictionaries(_scalar(key), _value(value, depth, False), max_size=4)
    element = _value(field, depth, oversized)
    if oversized:
        return st.builds(lambda one, n: [one] * n, element, st.integers(1_000, 5_000))
    return st.lists(element, max_size=3)


def messages(
    descriptor: Descriptor, depth: int = 0, oversized: bool = False
) -> st.SearchStrategy[Message]:
    """Messages of ``descriptor``'s type with any subset of their fields set."""
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for field in descriptor.fields:
        if field.type == F.TYPE_MESSAGE and depth >= MAX_DEPTH and not _is_map(field):
            continue
        if field.is_repeated:
            fields[field.name] = _repeated(field, depth, oversized)
        else:
            fields[field.name] = _value(field, depth, oversized)
    cls = GetMessageClass(descriptor)
    return st.fixed_dictionaries({}, optional=fields).map(lambda values: _build(cls, values))


def _build(cls: type[Message], values: dict[str, Any]) -> Message:
    message = cls()
    for name, value in values.items():
        field = cls.DESCRIPTOR.fields_by_name[name]
        target = getattr(message, name)
        if _is_map(field):
            for key, item in value.items():
                if isinstance(item, Message):
                    target[key].CopyFrom(item)
                else:
                    target[key] = item
        elif field.is_repeated:
            if field.type == F.TYPE_MESSAGE:
                for item in value:
                    target.add().CopyFrom(item)
            else:
                target.extend(value)
        elif field.type == F.TYPE_MESSAGE:
            target.CopyFrom(value)
        else:
            setattr(message, name, value)
    return message
