from turnpike.conversation.v1 import conversation_pb2 as _conversation_pb2
from turnpike.session.v1 import session_pb2 as _session_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RenderRequest(_message.Message):
    __slots__ = ("instructions", "tools", "items", "packed")
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    instructions: str
    tools: _containers.RepeatedCompositeFieldContainer[_conversation_pb2.Tool]
    items: _containers.RepeatedCompositeFieldContainer[_conversation_pb2.Item]
    packed: bool
    def __init__(self, instructions: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[_conversation_pb2.Tool, _Mapping]]] = ..., items: _Optional[_Iterable[_Union[_conversation_pb2.Item, _Mapping]]] = ..., packed: _Optional[bool] = ...) -> None: ...

class RenderAppendRequest(_message.Message):
    __slots__ = ("items", "packed")
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    PACKED_FIELD_NUMBER: _ClassVar[int]
    items: _containers.RepeatedCompositeFieldContainer[_conversation_pb2.Item]
    packed: bool
    def __init__(self, items: _Optional[_Iterable[_Union[_conversation_pb2.Item, _Mapping]]] = ..., packed: _Optional[bool] = ...) -> None: ...

class RenderResponse(_message.Message):
    __slots__ = ("tokens", "completion_prompt", "packed_tokens", "packed_completion_prompt")
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    PACKED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PACKED_COMPLETION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    tokens: _containers.RepeatedScalarFieldContainer[int]
    completion_prompt: _containers.RepeatedScalarFieldContainer[int]
    packed_tokens: bytes
    packed_completion_prompt: bytes
    def __init__(self, tokens: _Optional[_Iterable[int]] = ..., completion_prompt: _Optional[_Iterable[int]] = ..., packed_tokens: _Optional[bytes] = ..., packed_completion_prompt: _Optional[bytes] = ...) -> None: ...

class CountTextRequest(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class CountTextResponse(_message.Message):
    __slots__ = ("tokens",)
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    tokens: int
    def __init__(self, tokens: _Optional[int] = ...) -> None: ...

class RenderSessionRequest(_message.Message):
    __slots__ = ("seq", "full", "append", "trace")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    full: RenderRequest
    append: RenderAppendRequest
    trace: _session_pb2.TraceContext
    def __init__(self, seq: _Optional[int] = ..., full: _Optional[_Union[RenderRequest, _Mapping]] = ..., append: _Optional[_Union[RenderAppendRequest, _Mapping]] = ..., trace: _Optional[_Union[_session_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class RenderSessionReply(_message.Message):
    __slots__ = ("seq", "response", "refusal")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    seq: int
    response: RenderResponse
    refusal: _session_pb2.Refusal
    def __init__(self, seq: _Optional[int] = ..., response: _Optional[_Union[RenderResponse, _Mapping]] = ..., refusal: _Optional[_Union[_session_pb2.Refusal, _Mapping]] = ...) -> None: ...
