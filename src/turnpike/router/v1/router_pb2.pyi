from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ModelConfig(_message.Message):
    __slots__ = ("id", "aliases", "backend", "owned_by", "context_window", "max_output_tokens", "tokens_per_second", "ttft_ms", "prefill_tokens_per_second", "created")
    ID_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    OWNED_BY_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_WINDOW_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    id: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    backend: str
    owned_by: str
    context_window: int
    max_output_tokens: int
    tokens_per_second: float
    ttft_ms: float
    prefill_tokens_per_second: float
    created: int
    def __init__(self, id: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., backend: _Optional[str] = ..., owned_by: _Optional[str] = ..., context_window: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., tokens_per_second: _Optional[float] = ..., ttft_ms: _Optional[float] = ..., prefill_tokens_per_second: _Optional[float] = ..., created: _Optional[int] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelConfig]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelConfig, _Mapping]]] = ...) -> None: ...

class ResolveModelRequest(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: str
    def __init__(self, model: _Optional[str] = ...) -> None: ...

class RouteRequest(_message.Message):
    __slots__ = ("model", "affinity_key", "prompt_tokens", "exclude_workers")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    AFFINITY_KEY_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    EXCLUDE_WORKERS_FIELD_NUMBER: _ClassVar[int]
    model: str
    affinity_key: str
    prompt_tokens: int
    exclude_workers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, model: _Optional[str] = ..., affinity_key: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., exclude_workers: _Optional[_Iterable[str]] = ...) -> None: ...

class RouteDecision(_message.Message):
    __slots__ = ("model", "worker_id", "worker_address", "affinity_hit")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    WORKER_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    AFFINITY_HIT_FIELD_NUMBER: _ClassVar[int]
    model: ModelConfig
    worker_id: str
    worker_address: str
    affinity_hit: bool
    def __init__(self, model: _Optional[_Union[ModelConfig, _Mapping]] = ..., worker_id: _Optional[str] = ..., worker_address: _Optional[str] = ..., affinity_hit: _Optional[bool] = ...) -> None: ...
