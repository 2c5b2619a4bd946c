from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Item(_message.Message):
    __slots__ = ("kind", "id", "role", "text", "call_id", "name", "arguments", "images", "custom")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[Item.Kind]
        MESSAGE: _ClassVar[Item.Kind]
        FUNCTION_CALL: _ClassVar[Item.Kind]
        FUNCTION_CALL_OUTPUT: _ClassVar[Item.Kind]
    KIND_UNSPECIFIED: Item.Kind
    MESSAGE: Item.Kind
    FUNCTION_CALL: Item.Kind
    FUNCTION_CALL_OUTPUT: Item.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_FIELD_NUMBER: _ClassVar[int]
    kind: Item.Kind
    id: str
    role: str
    text: str
    call_id: str
    name: str
    arguments: str
    images: _containers.RepeatedCompositeFieldContainer[Image]
    custom: bool
    def __init__(self, kind: _Optional[_Union[Item.Kind, str]] = ..., id: _Optional[str] = ..., role: _Optional[str] = ..., text: _Optional[str] = ..., call_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ..., images: _Optional[_Iterable[_Union[Image, _Mapping]]] = ..., custom: _Optional[bool] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ("url", "file_id", "detail")
    URL_FIELD_NUMBER: _ClassVar[int]
    FILE_ID_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    url: str
    file_id: str
    detail: str
    def __init__(self, url: _Optional[str] = ..., file_id: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("name", "description", "parameters_json", "strict", "custom", "format_json")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_JSON_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_FIELD_NUMBER: _ClassVar[int]
    FORMAT_JSON_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters_json: str
    strict: bool
    custom: bool
    format_json: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters_json: _Optional[str] = ..., strict: _Optional[bool] = ..., custom: _Optional[bool] = ..., format_json: _Optional[str] = ...) -> None: ...
