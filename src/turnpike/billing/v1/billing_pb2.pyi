from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class UsageEvent(_message.Message):
    __slots__ = ("event_id", "tenant", "model", "input_tokens", "cached_tokens", "output_tokens", "created_at")
    EVENT_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    event_id: str
    tenant: str
    model: str
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    created_at: int
    def __init__(self, event_id: _Optional[str] = ..., tenant: _Optional[str] = ..., model: _Optional[str] = ..., input_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., created_at: _Optional[int] = ...) -> None: ...

class RecordUsageResponse(_message.Message):
    __slots__ = ("duplicate",)
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    duplicate: bool
    def __init__(self, duplicate: _Optional[bool] = ...) -> None: ...

class RecordUsageBatchRequest(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[UsageEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[UsageEvent, _Mapping]]] = ...) -> None: ...

class RecordUsageBatchResponse(_message.Message):
    __slots__ = ("duplicate",)
    DUPLICATE_FIELD_NUMBER: _ClassVar[int]
    duplicate: _containers.RepeatedScalarFieldContainer[bool]
    def __init__(self, duplicate: _Optional[_Iterable[bool]] = ...) -> None: ...

class GetUsageRequest(_message.Message):
    __slots__ = ("tenant",)
    TENANT_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    def __init__(self, tenant: _Optional[str] = ...) -> None: ...

class ModelUsage(_message.Message):
    __slots__ = ("model", "responses", "input_tokens", "cached_tokens", "output_tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    responses: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    def __init__(self, model: _Optional[str] = ..., responses: _Optional[int] = ..., input_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ...) -> None: ...

class UsageTotals(_message.Message):
    __slots__ = ("tenant", "responses", "input_tokens", "cached_tokens", "output_tokens", "by_model")
    TENANT_FIELD_NUMBER: _ClassVar[int]
    RESPONSES_FIELD_NUMBER: _ClassVar[int]
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    BY_MODEL_FIELD_NUMBER: _ClassVar[int]
    tenant: str
    responses: int
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    by_model: _containers.RepeatedCompositeFieldContainer[ModelUsage]
    def __init__(self, tenant: _Optional[str] = ..., responses: _Optional[int] = ..., input_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., by_model: _Optional[_Iterable[_Union[ModelUsage, _Mapping]]] = ...) -> None: ...
