from turnpike.conversation.v1 import conversation_pb2 as _conversation_pb2
from turnpike.session.v1 import session_pb2 as _session_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Mode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODE_UNSPECIFIED: _ClassVar[Mode]
    FULL: _ClassVar[Mode]
    INCREMENTAL: _ClassVar[Mode]

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    ALLOW: _ClassVar[Verdict]
    FLAG: _ClassVar[Verdict]
    BLOCK: _ClassVar[Verdict]
MODE_UNSPECIFIED: Mode
FULL: Mode
INCREMENTAL: Mode
VERDICT_UNSPECIFIED: Verdict
ALLOW: Verdict
FLAG: Verdict
BLOCK: Verdict

class ClassifyRequest(_message.Message):
    __slots__ = ("tenant", "conversation_id", "mode", "items", "fast_path")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    FAST_PATH_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    conversation_id: str
    mode: Mode
    items: _containers.RepeatedCompositeFieldContainer[_conversation_pb2.Item]
    fast_path: bool
    def __init__(self, tenant: _Optional[str] = ..., conversation_id: _Optional[str] = ..., mode: _Optional[_Union[Mode, str]] = ..., items: _Optional[_Iterable[_Union[_conversation_pb2.Item, _Mapping]]] = ..., fast_path: _Optional[bool] = ...) -> None: ...

class Finding(_message.Message):
    __slots__ = ("category", "score", "item_id", "detail")
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    ITEM_ID_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    category: str
    score: float
    item_id: str
    detail: str
    def __init__(self, category: _Optional[str] = ..., score: _Optional[float] = ..., item_id: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("verdict", "findings", "max_score", "items_scored", "items_seen")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    FINDINGS_FIELD_NUMBER: _ClassVar[int]
    MAX_SCORE_FIELD_NUMBER: _ClassVar[int]
    ITEMS_SCORED_FIELD_NUMBER: _ClassVar[int]
    ITEMS_SEEN_FIELD_NUMBER: _ClassVar[int]
    verdict: Verdict
    findings: _containers.RepeatedCompositeFieldContainer[Finding]
    max_score: float
    items_scored: int
    items_seen: int
    def __init__(self, verdict: _Optional[_Union[Verdict, str]] = ..., findings: _Optional[_Iterable[_Union[Finding, _Mapping]]] = ..., max_score: _Optional[float] = ..., items_scored: _Optional[int] = ..., items_seen: _Optional[int] = ...) -> None: ...

class ClassifySessionRequest(_message.Message):
    __slots__ = ("seq", "request", "trace")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    TRACE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    request: ClassifyRequest
    trace: _session_pb2.TraceContext
    def __init__(self, seq: _Optional[int] = ..., request: _Optional[_Union[ClassifyRequest, _Mapping]] = ..., trace: _Optional[_Union[_session_pb2.TraceContext, _Mapping]] = ...) -> None: ...

class ClassifySessionReply(_message.Message):
    __slots__ = ("seq", "response", "refusal")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    seq: int
    response: ClassifyResponse
    refusal: _session_pb2.Refusal
    def __init__(self, seq: _Optional[int] = ..., response: _Optional[_Union[ClassifyResponse, _Mapping]] = ..., refusal: _Optional[_Union[_session_pb2.Refusal, _Mapping]] = ...) -> None: ...
