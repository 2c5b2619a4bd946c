from turnpike.conversation.v1 import conversation_pb2 as _conversation_pb2
from turnpike.inference.v1 import inference_pb2 as _inference_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResolveRequest(_message.Message):
    __slots__ = ("images",)
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedCompositeFieldContainer[_conversation_pb2.Image]
    def __init__(self, images: _Optional[_Iterable[_Union[_conversation_pb2.Image, _Mapping]]] = ...) -> None: ...

class ResolvedImage(_message.Message):
    __slots__ = ("mime_type", "width", "height", "detail", "tokens", "sha256", "error")
    MIME_TYPE_FIELD_NUMBER: _ClassVar[int]
    WIDTH_FIELD_NUMBER: _ClassVar[int]
    HEIGHT_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    mime_type: str
    width: int
    height: int
    detail: str
    tokens: int
    sha256: str
    error: str
    def __init__(self, mime_type: _Optional[str] = ..., width: _Optional[int] = ..., height: _Optional[int] = ..., detail: _Optional[str] = ..., tokens: _Optional[int] = ..., sha256: _Optional[str] = ..., error: _Optional[str] = ...) -> None: ...

class ResolveResponse(_message.Message):
    __slots__ = ("images", "total_tokens")
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    images: _containers.RepeatedCompositeFieldContainer[ResolvedImage]
    total_tokens: int
    def __init__(self, images: _Optional[_Iterable[_Union[ResolvedImage, _Mapping]]] = ..., total_tokens: _Optional[int] = ...) -> None: ...

class ProxyGenerateRequest(_message.Message):
    __slots__ = ("worker_address", "request")
    WORKER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    worker_address: str
    request: _inference_pb2.GenerateRequest
    def __init__(self, worker_address: _Optional[str] = ..., request: _Optional[_Union[_inference_pb2.GenerateRequest, _Mapping]] = ...) -> None: ...
