"""All configuration, in one place, read from environment variables.

Every service reads only its own settings class, at start-up, before it serves: a
malformed value raises ``ConfigError`` naming the variable, and the service exits 2
saying so (``exit_on_config_error``). Each variable is declared once, with its type,
range, default and description (``turnpike.config_model``): the backends' here, the
gateway's in ``turnpike.config_gateway``, and what several services share in
``turnpike.config_shared``. docs/settings.md and the defaults of .env and the Kubernetes
base are written from these declarations by ``make settings``; a test fails when they
are stale. Defaults are the loopback layout of ``make run`` (ports:
``turnpike.catalogue``); Compose and Kubernetes override them through the environment.
"""

from __future__ import annotations

from turnpike.catalogue import LOOPBACK, loopback_workers
from turnpike.config_gateway import (
    API_KEYS_VARIABLE,
    DEFAULT_API_KEYS,
    DEV_API_KEY,
    GATEWAY_PROCESSES_VARIABLE,
    SERVER_KEY_BYTES,
    SERVER_KEY_VARIABLE,
    TENANTS_FILE_VARIABLE,
    AdaptiveAdmissionSettings,
    Endpoints,
    GatewaySettings,
    PdfSettings,
    decode_server_key,
    parse_api_keys,
)
from turnpike.config_model import (
    CommaList,
    ConfigError,
    EnvSettings,
    Flag,
    Integer,
    Number,
    PathText,
    Text,
    exit_on_config_error,
    setting,
)
from turnpike.config_shared import (
    GRPC_MAX_MESSAGE_VARIABLE,
    LOG_LEVEL_VARIABLE,
    LOG_LEVELS,
    STATE_DIR_TEXT,
    GrpcChannelSettings,
    GrpcServerSettings,
    ImageresSettings,
    LoggingSettings,
    default_state_dir,
    grpc_max_message_bytes,
    ledger_path_in,
    log_level,
    vocab_dir_in,
)

_LOOPBACK_WORKERS = [f"{wid}={LOOPBACK}:{port}" for wid, port in loopback_workers(2).items()]


class RouterSettings(EnvSettings):
    readers = ("router",)

    workers: CommaList = setting(
        "TURNPIKE_WORKERS",
        default_factory=lambda: list(_LOOPBACK_WORKERS),
        shown_default=",".join(_LOOPBACK_WORKERS),
        description='Inference workers as "id=host:port", comma separated (make run\'s two).',
    )
    models_file: Text = setting(
        "TURNPIKE_MODELS_FILE",
        "",
        "The models file (JSON); empty: the one shipped with the router.",
    )
    health_interval_s: Number = setting(
        "TURNPIKE_ROUTER_HEALTH_INTERVAL_S", 1.0, "Seconds between health checks of a worker.", gt=0
    )
    affinity_capacity: Integer = setting(
        "TURNPIKE_ROUTER_AFFINITY_CAPACITY",
        100_000,
        "Conversations remembered for worker affinity (least recently used forgotten first).",
        ge=1,
    )
    load_window_s: Number = setting(
        "TURNPIKE_ROUTER_LOAD_WINDOW_S",
        10.0,
        "A worker's load is the weighted routes it was given in this many recent seconds.",
        gt=0,
    )


class WorkerSettings(EnvSettings):
    readers = ("worker",)

    worker_id: Text = setting("TURNPIKE_WORKER_ID", "worker-1", "The worker's name.")
    cache_tokens: Integer = setting(
        "TURNPIKE_WORKER_CACHE_TOKENS",
        2_000_000,
        "Prefix KV cache size, in prompt tokens (64-token blocks, least recently used evicted).",
        ge=0,
    )
    kept_bytes: Integer = setting(
        "TURNPIKE_WORKER_KEPT_BYTES",
        64 * 1024 * 1024,
        "Bytes of requests a worker keeps so that a WebSocket's next turn sends only what is "
        "new (a conversation's newest request each, least recently kept forgotten first); "
        "0 keeps none (every turn is sent whole).",
        ge=0,
    )
    error_rate: Number = setting(
        "TURNPIKE_WORKER_ERROR_RATE",
        0.0,
        'A fault for tests: the fraction of requests answered with a "model_error" Error '
        "event instead of output.",
        ge=0,
        le=1,
    )
    stall_after_tokens: Integer = setting(
        "TURNPIKE_WORKER_STALL_AFTER_TOKENS",
        0,
        "A fault for tests: above 0, stop after this many output tokens and hang until the "
        "caller cancels.",
        ge=0,
    )
    delta_interval_ms: Number = setting(
        "TURNPIKE_WORKER_DELTA_INTERVAL_MS",
        20.0,
        "The simulator's stream interval: after the first token (always alone), one delta per "
        "this many ms of decode; 0 sends every token as it is due (as vLLM's and "
        "TensorRT-LLM's stream interval: the time to first token and the rate are unchanged).",
        ge=0,
    )
    delta_max_tokens: Integer = setting(
        "TURNPIKE_WORKER_DELTA_MAX_TOKENS", 20, "Tokens per simulator delta at most.", ge=1
    )
    cerebras_api_key: Text = setting(
        "CEREBRAS_API_KEY",
        "",
        "The Cerebras backend exists only when it is set (the Cerebras SDK's own name).",
        secret=True,
    )
    cerebras_base_url: Text = setting(
        "CEREBRAS_BASE_URL", "", "The Cerebras API; empty: the SDK's default (the public API)."
    )
    cerebras_max_retries: Integer = setting(
        "TURNPIKE_CEREBRAS_MAX_RETRIES",
        3,
        "Retries of a rate-limited (429) request before its first output.",
        ge=0,
    )
    cerebras_timeout_s: Number = setting(
        "TURNPIKE_CEREBRAS_TIMEOUT_S",
        60.0,
        "Bounds each wait on the backend (connect, and each read of the stream), not the "
        "whole generation.",
        gt=0,
    )
    openai_compat_base_url: Text = setting(
        "TURNPIKE_OPENAI_COMPAT_BASE_URL",
        "",
        "The OpenAI-compatible backend (a vLLM, SGLang or llama.cpp server), with the /v1 "
        "(http://vllm:8000/v1); it exists only when this is set.",
    )
    openai_compat_api_key: Text = setting(
        "TURNPIKE_OPENAI_COMPAT_API_KEY",
        "",
        "Its key; may stay empty for a server started without one.",
        secret=True,
    )
    openai_compat_model: Text = setting(
        "TURNPIKE_OPENAI_COMPAT_MODEL",
        "",
        "The server's name for the model; empty: the router's model id is sent as is.",
    )
    openai_compat_max_retries: Integer = setting(
        "TURNPIKE_OPENAI_COMPAT_MAX_RETRIES",
        3,
        "Retries of a 429 before the first output.",
        ge=0,
    )
    openai_compat_timeout_s: Number = setting(
        "TURNPIKE_OPENAI_COMPAT_TIMEOUT_S", 60.0, "The wait bound per read.", gt=0
    )
    openai_compat_cache_salt: Flag = setting(
        "TURNPIKE_OPENAI_COMPAT_CACHE_SALT",
        True,
        "A cache_salt per tenant on every request (vLLM's prefix-cache isolation); off for a "
        "server that refuses the field.",
    )
    openai_compat_calls_as_json: Flag = setting(
        "TURNPIKE_OPENAI_COMPAT_CALLS_AS_JSON",
        False,
        "A call that tool_choice requires (required, or a named function) is asked as a "
        "json_schema response_format of the call ({name, arguments}) instead of as tools: for "
        "a model whose chat template has no tool calls (its server's grammar then makes one).",
    )


class BillingSettings(EnvSettings):
    readers = ("billing",)

    ledger_path: PathText = setting(
        "TURNPIKE_BILLING_LEDGER",
        default_factory=lambda: str(ledger_path_in(default_state_dir())),
        shown_default=f"billing/ledger.sqlite3 in the state folder ({STATE_DIR_TEXT})",
        description="The billing ledger (SQLite).",
    )


class TokenizerSettings(EnvSettings):
    readers = ("tokenizer",)

    vocab_dir: PathText = setting(
        "TURNPIKE_VOCAB_DIR",
        default_factory=lambda: str(vocab_dir_in(default_state_dir())),
        shown_default=f"vocab/ in the state folder ({STATE_DIR_TEXT})",
        description="Where the o200k vocabulary is unpacked from its package for the harmony "
        "renderer.",
    )
    max_chars: Integer = setting(
        "TURNPIKE_TOKENIZER_MAX_CHARS",
        2 * 1024 * 1024,
        "Characters of text one render may hold (a whole conversation); over it, "
        "RESOURCE_EXHAUSTED before any encoding. Bounds a render's time (about a second per "
        "million characters at worst) and memory. Twice the gateway's TURNPIKE_MAX_INPUT_CHARS.",
        ge=1,
    )


class SafetySettings(EnvSettings):
    readers = ("safety",)

    flag_threshold: Number = setting(
        "TURNPIKE_SAFETY_FLAG_THRESHOLD",
        0.8,
        "Classifier score at or above which a conversation is flagged.",
        ge=0,
        le=1,
    )
    block_threshold: Number = setting(
        "TURNPIKE_SAFETY_BLOCK_THRESHOLD",
        0.98,
        "Score at or above which a user message blocks the conversation.",
        ge=0,
        le=1,
    )
    state_max_conversations: Integer = setting(
        "TURNPIKE_SAFETY_STATE_MAX_CONVERSATIONS",
        10_000,
        "Conversations whose incremental state is kept (least recently used forgotten first).",
        ge=1,
    )


__all__ = [
    "API_KEYS_VARIABLE",
    "DEFAULT_API_KEYS",
    "DEV_API_KEY",
    "GATEWAY_PROCESSES_VARIABLE",
    "GRPC_MAX_MESSAGE_VARIABLE",
    "LOG_LEVELS",
    "LOG_LEVEL_VARIABLE",
    "SERVER_KEY_BYTES",
    "SERVER_KEY_VARIABLE",
    "TENANTS_FILE_VARIABLE",
    "AdaptiveAdmissionSettings",
    "BillingSettings",
    "ConfigError",
    "Endpoints",
    "GatewaySettings",
    "GrpcChannelSettings",
    "GrpcServerSettings",
    "ImageresSettings",
    "LoggingSettings",
    "PdfSettings",
    "RouterSettings",
    "SafetySettings",
    "TokenizerSettings",
    "WorkerSettings",
    "decode_server_key",
    "default_state_dir",
    "exit_on_config_error",
    "grpc_max_message_bytes",
    "ledger_path_in",
    "log_level",
    "parse_api_keys",
    "vocab_dir_in",
]
