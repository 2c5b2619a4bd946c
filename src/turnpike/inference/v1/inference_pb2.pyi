from turnpike.conversation.v1 import conversation_pb2 as _conversation_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GenerateEvents(_message.Message):
    __slots__ = ("events",)
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[GenerateEvent]
    def __init__(self, events: _Optional[_Iterable[_Union[GenerateEvent, _Mapping]]] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "max_output_tokens", "seed", "presence_penalty", "frequency_penalty")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    PRESENCE_PENALTY_FIELD_NUMBER: _ClassVar[int]
    FREQUENCY_PENALTY_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    max_output_tokens: int
    seed: int
    presence_penalty: float
    frequency_penalty: float
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., max_output_tokens: _Optional[int] = ..., seed: _Optional[int] = ..., presence_penalty: _Optional[float] = ..., frequency_penalty: _Optional[float] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("request_id", "model", "prompt", "instructions", "items", "tools", "tool_choice", "parallel_tool_calls", "sampling", "tokens_per_second", "ttft_ms", "prefill_tokens_per_second", "backend", "image_tokens", "text_format", "reasoning_effort", "reasoning_summary", "max_tool_calls", "verbosity", "tenant", "keep", "continues", "continued_items", "continued_tokens")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    IMAGE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    REASONING_EFFORT_FIELD_NUMBER: _ClassVar[int]
    REASONING_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    MAX_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    VERBOSITY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    KEEP_FIELD_NUMBER: _ClassVar[int]
    CONTINUES_FIELD_NUMBER: _ClassVar[int]
    CONTINUED_ITEMS_FIELD_NUMBER: _ClassVar[int]
    CONTINUED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    model: str
    prompt: bytes
    instructions: str
    items: _containers.RepeatedCompositeFieldContainer[_conversation_pb2.Item]
    tools: _containers.RepeatedCompositeFieldContainer[_conversation_pb2.Tool]
    tool_choice: str
    parallel_tool_calls: bool
    sampling: SamplingParams
    tokens_per_second: float
    ttft_ms: float
    prefill_tokens_per_second: float
    backend: str
    image_tokens: int
    text_format: TextFormat
    reasoning_effort: str
    reasoning_summary: str
    max_tool_calls: int
    verbosity: str
    tenant: str
    keep: bool
    continues: str
    continued_items: int
    continued_tokens: int
    def __init__(self, request_id: _Optional[str] = ..., model: _Optional[str] = ..., prompt: _Optional[bytes] = ..., instructions: _Optional[str] = ..., items: _Optional[_Iterable[_Union[_conversation_pb2.Item, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_conversation_pb2.Tool, _Mapping]]] = ..., tool_choice: _Optional[str] = ..., parallel_tool_calls: _Optional[bool] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., tokens_per_second: _Optional[float] = ..., ttft_ms: _Optional[float] = ..., prefill_tokens_per_second: _Optional[float] = ..., backend: _Optional[str] = ..., image_tokens: _Optional[int] = ..., text_format: _Optional[_Union[TextFormat, _Mapping]] = ..., reasoning_effort: _Optional[str] = ..., reasoning_summary: _Optional[str] = ..., max_tool_calls: _Optional[int] = ..., verbosity: _Optional[str] = ..., tenant: _Optional[str] = ..., keep: _Optional[bool] = ..., continues: _Optional[str] = ..., continued_items: _Optional[int] = ..., continued_tokens: _Optional[int] = ...) -> None: ...

class TextFormat(_message.Message):
    __slots__ = ("type", "name", "description", "schema_json", "strict")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SCHEMA_JSON_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    type: str
    name: str
    description: str
    schema_json: str
    strict: bool
    def __init__(self, type: _Optional[str] = ..., name: _Optional[str] = ..., description: _Optional[str] = ..., schema_json: _Optional[str] = ..., strict: _Optional[bool] = ...) -> None: ...

class GenerateEvent(_message.Message):
    __slots__ = ("item_started", "delta", "item_done", "finished", "error")
    ITEM_STARTED_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    ITEM_DONE_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    item_started: ItemStarted
    delta: Delta
    item_done: ItemDone
    finished: Finished
    error: Error
    def __init__(self, item_started: _Optional[_Union[ItemStarted, _Mapping]] = ..., delta: _Optional[_Union[Delta, _Mapping]] = ..., item_done: _Optional[_Union[ItemDone, _Mapping]] = ..., finished: _Optional[_Union[Finished, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class ItemStarted(_message.Message):
    __slots__ = ("kind", "call_id", "name", "custom")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[ItemStarted.Kind]
        MESSAGE: _ClassVar[ItemStarted.Kind]
        FUNCTION_CALL: _ClassVar[ItemStarted.Kind]
        REASONING: _ClassVar[ItemStarted.Kind]
    KIND_UNSPECIFIED: ItemStarted.Kind
    MESSAGE: ItemStarted.Kind
    FUNCTION_CALL: ItemStarted.Kind
    REASONING: ItemStarted.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    CUSTOM_FIELD_NUMBER: _ClassVar[int]
    kind: ItemStarted.Kind
    call_id: str
    name: str
    custom: bool
    def __init__(self, kind: _Optional[_Union[ItemStarted.Kind, str]] = ..., call_id: _Optional[str] = ..., name: _Optional[str] = ..., custom: _Optional[bool] = ...) -> None: ...

class Delta(_message.Message):
    __slots__ = ("text", "tokens", "summary")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    text: str
    tokens: int
    summary: bool
    def __init__(self, text: _Optional[str] = ..., tokens: _Optional[int] = ..., summary: _Optional[bool] = ...) -> None: ...

class ItemDone(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "cached_tokens", "output_tokens", "reasoning_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REASONING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    reasoning_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., reasoning_tokens: _Optional[int] = ...) -> None: ...

class Timings(_message.Message):
    __slots__ = ("queue_ms", "prefill_ms", "decode_ms", "ttft_ms", "total_ms")
    QUEUE_MS_FIELD_NUMBER: _ClassVar[int]
    PREFILL_MS_FIELD_NUMBER: _ClassVar[int]
    DECODE_MS_FIELD_NUMBER: _ClassVar[int]
    TTFT_MS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_MS_FIELD_NUMBER: _ClassVar[int]
    queue_ms: float
    prefill_ms: float
    decode_ms: float
    ttft_ms: float
    total_ms: float
    def __init__(self, queue_ms: _Optional[float] = ..., prefill_ms: _Optional[float] = ..., decode_ms: _Optional[float] = ..., ttft_ms: _Optional[float] = ..., total_ms: _Optional[float] = ...) -> None: ...

class Finished(_message.Message):
    __slots__ = ("finish_reason", "usage", "timings", "worker_id")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    WORKER_ID_FIELD_NUMBER: _ClassVar[int]
    finish_reason: str
    usage: Usage
    timings: Timings
    worker_id: str
    def __init__(self, finish_reason: _Optional[str] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., timings: _Optional[_Union[Timings, _Mapping]] = ..., worker_id: _Optional[str] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message", "retryable")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    retryable: bool
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., retryable: _Optional[bool] = ...) -> None: ...
