"""The gateway's settings: its listener, keys, bounds on input, WebSocket mode, stores,
where it finds each backend, and its PDF workers. Declared with
``turnpike.config_model``; the gateway imports them from ``turnpike.config``."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from pydantic import Field

from turnpike.catalogue import (
    BACKENDS,
    BILLING,
    GATEWAY,
    IMAGERES,
    LOOPBACK,
    ROUTER,
    SAFETY,
    TOKENIZER,
    Service,
)
from turnpike.config_model import (
    Address,
    ConfigError,
    EnvSettings,
    Flag,
    Integer,
    Number,
    Port,
    Text,
    TrimmedText,
    setting,
)
from turnpike.config_shared import (
    GRPC_MAX_MESSAGE_VARIABLE,
    ImageresSettings,
    grpc_max_message_bytes,
    metrics_port_setting,
    port_setting,
)

# The development key, tenant "dev": what make run accepts unless told otherwise.
DEV_API_KEY = "sk-turnpike-dev"
DEFAULT_API_KEYS = f"{DEV_API_KEY}:dev"
API_KEYS_VARIABLE = "TURNPIKE_API_KEYS"
# A YAML file of tenants, their key hashes and limits (turnpike.gateway.tenancy.tenants); it replaces
# TURNPIKE_API_KEYS.
TENANTS_FILE_VARIABLE = "TURNPIKE_TENANTS_FILE"
GATEWAY_PROCESSES_VARIABLE = "TURNPIKE_GATEWAY_PROCESSES"
SERVER_KEY_VARIABLE = "TURNPIKE_SERVER_KEY"
SERVER_KEY_BYTES = 32


def parse_api_keys(spec: str) -> list[tuple[str, str]]:
    """``TURNPIKE_API_KEYS`` ("key:tenant", comma separated) as (key, tenant) pairs, in
    order; a key may hold colons (the tenant follows the last one). ConfigError for an
    entry without both parts, a key listed twice, or no pair at all. Keys are secrets:
    errors name entries by position, never by their text."""
    pairs: list[tuple[str, str]] = []
    first_entry: dict[str, int] = {}
    entries = [entry.strip() for entry in spec.split(",")]
    for number, entry in enumerate(filter(None, entries), start=1):
        key, colon, tenant = (part.strip() for part in entry.rpartition(":"))
        if not colon or not key or not tenant:
            raise ConfigError(f"{API_KEYS_VARIABLE}: entry {number} is not key:tenant")
        if key in first_entry:
            raise ConfigError(
                f"{API_KEYS_VARIABLE}: entry {number} repeats the key of entry {first_entry[key]}"
            )
        first_entry[key] = number
        pairs.append((key, tenant))
    if not pairs:
        raise ConfigError.invalid(API_KEYS_VARIABLE, spec, "no key:tenant pair")
    return pairs


def decode_server_key(text: str) -> bytes:
    """The server key (``TURNPIKE_SERVER_KEY``) from its base64 text; ValueError saying
    why when it is not 32 bytes of base64."""
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("is not valid base64") from None
    if len(key) != SERVER_KEY_BYTES:
        raise ValueError(f"decodes to {len(key)} bytes; expected {SERVER_KEY_BYTES}")
    return key


def _address_setting(backend: Service) -> Any:
    """Where the gateway finds ``backend`` (one of the catalogue's BACKENDS)."""
    assert backend.address_variable is not None, backend.name
    return setting(
        backend.address_variable,
        backend.loopback_address,
        f"Where the gateway finds {backend.name} (host:port).",
    )


class Endpoints(EnvSettings):
    """Where each backend service listens (host:port)."""

    readers = ("gateway",)

    safety: Address = _address_setting(SAFETY)
    tokenizer: Address = _address_setting(TOKENIZER)
    router: Address = _address_setting(ROUTER)
    billing: Address = _address_setting(BILLING)
    imageres: Address = _address_setting(IMAGERES)


assert {SAFETY, TOKENIZER, ROUTER, BILLING, IMAGERES} == set(BACKENDS)


class PdfSettings(EnvSettings):
    """The gateway's PDF text workers (turnpike.gateway.upstream.pdf_pool): processes of their own, each
    reading one PDF at a time under kernel limits, so a PDF built to be expensive costs
    only its own request (docs/tenants-and-limits.md, "Input files"). A 100-page text PDF
    takes about 0.3 s and 25 MiB resident (bench/results/pdf-extraction.md)."""

    readers = ("gateway",)

    workers: Integer = setting(
        "TURNPIKE_PDF_WORKERS", 2, "Worker processes per gateway process (PDFs read at once).", gt=0
    )
    queue: Integer = setting(
        "TURNPIKE_PDF_QUEUE",
        16,
        "PDFs that may wait for a worker; one more is refused at once (503 server_overloaded).",
        ge=0,
    )
    cpu_s: Integer = setting("TURNPIKE_PDF_CPU_S", 5, "CPU seconds per PDF (RLIMIT_CPU).", gt=0)
    timeout_s: Number = setting(
        "TURNPIKE_PDF_TIMEOUT_S",
        10.0,
        "Wall-clock seconds per PDF; then the worker is killed and replaced.",
        gt=0,
    )
    memory_mb: Integer = setting(
        "TURNPIKE_PDF_MEMORY_MB", 256, "A PDF worker's address space (RLIMIT_AS), MiB.", gt=0
    )
    max_pages: Integer = setting("TURNPIKE_PDF_MAX_PAGES", 100, "Pages read per PDF.", gt=0)
    max_chars: Integer = setting(
        "TURNPIKE_PDF_MAX_CHARS",
        200_000,
        "Characters of text from all the PDFs of one request.",
        gt=0,
    )


class AdaptiveAdmissionSettings(EnvSettings):
    """The adaptive bound on a gateway process's responses in flight
    (turnpike.gateway.tenancy.adaptive_limit): it follows each response's time to first
    token and holds it near its unloaded value, under TURNPIKE_MAX_IN_FLIGHT
    (docs/tenants-and-limits.md, "Limits and overload")."""

    readers = ("gateway",)

    enabled: Flag = setting(
        "TURNPIKE_ADAPTIVE_ADMISSION",
        True,
        "Move the in-flight bound with the measured time to first token. Off: the bound is "
        "TURNPIKE_MAX_IN_FLIGHT, fixed.",
    )
    min_in_flight: Integer = setting(
        "TURNPIKE_ADAPTIVE_MIN_IN_FLIGHT",
        8,
        "The least the adaptive bound falls to (TURNPIKE_MAX_IN_FLIGHT if that is lower).",
        ge=1,
    )
    initial_in_flight: Integer = setting(
        "TURNPIKE_ADAPTIVE_INITIAL_IN_FLIGHT",
        64,
        "The adaptive bound at start, before any response has been measured (within the "
        "minimum and TURNPIKE_MAX_IN_FLIGHT).",
        ge=1,
    )
    tolerance: Number = setting(
        "TURNPIKE_ADAPTIVE_TOLERANCE",
        2.0,
        "How far the median time to first token may rise over its recent lowest (times it, "
        "plus 20 ms) before the bound is cut; below it, and in use, the bound grows.",
        ge=1.0,
        le=100.0,
    )
    window_s: Number = setting(
        "TURNPIKE_ADAPTIVE_WINDOW_S",
        0.5,
        "Seconds of responses (3 at least) whose median time to first token is one sample "
        "of the adaptive bound.",
        gt=0,
        le=60.0,
    )


MIB = 1024 * 1024


class GatewaySettings(EnvSettings):
    readers = ("gateway",)

    host: Text = setting("TURNPIKE_GATEWAY_HOST", LOOPBACK, "The address the gateway listens on.")
    port: Port = port_setting(GATEWAY)
    metrics_port: Port = metrics_port_setting(GATEWAY)
    # Read before api_keys, whose default depends on it.
    tenants_file: TrimmedText = setting(
        TENANTS_FILE_VARIABLE,
        "",
        "The tenants file (turnpike.gateway.tenancy.tenants: key hashes and limits per tenant), read at start "
        f"and on SIGHUP. Set, it replaces {API_KEYS_VARIABLE}, which must then be empty or unset.",
    )
    api_keys: Text = setting(
        API_KEYS_VARIABLE,
        default_factory=lambda read: "" if read.get("tenants_file") else DEFAULT_API_KEYS,
        shown_default=f"{DEFAULT_API_KEYS} (none with a tenants file)",
        deployed=DEFAULT_API_KEYS,
        secret=True,
        description='"key:tenant" pairs, comma separated; a key may hold colons. The '
        "development key works out of the box.",
    )
    default_model: Text = setting(
        "TURNPIKE_DEFAULT_MODEL", "turnpike-sim", "The model of a request that names none."
    )
    max_body_bytes: Integer = setting(
        "TURNPIKE_MAX_BODY_BYTES", 8 * MIB, "Bytes of an HTTP request body.", ge=1
    )
    max_frame_bytes: Integer = setting(
        "TURNPIKE_MAX_FRAME_BYTES", 8 * MIB, "Bytes of a WebSocket message.", ge=1
    )
    max_input_chars: Integer = setting(
        "TURNPIKE_MAX_INPUT_CHARS",
        MIB,
        "Characters of text a create request may hold in all its strings (input, "
        "instructions, tools), checked before any backend sees it (turnpike.gateway.protocol.bounds): a "
        "131,072-token context window at 8 characters a token, twice what English averages.",
        ge=1,
    )
    max_conversation_items: Integer = setting(
        "TURNPIKE_MAX_CONVERSATION_ITEMS",
        10_000,
        "Items of a conversation (stored, or a chain of responses): a long agent session's "
        "tool calls several times over.",
        ge=1,
    )
    max_conversation_bytes: Integer = setting(
        "TURNPIKE_MAX_CONVERSATION_BYTES",
        8 * MIB,
        "Bytes of a conversation's items as stored (compact JSON). Every turn sends the whole "
        f"conversation to the backends: at most half of {GRPC_MAX_MESSAGE_VARIABLE}.",
        ge=1,
    )
    header_timeout_s: Number = setting(
        "TURNPIKE_HEADER_TIMEOUT_S",
        10.0,
        "Seconds a client has to send a request's head (also of a WebSocket upgrade); past it "
        "the connection is closed (408), so slow-header clients cannot hold connections.",
        gt=0,
    )
    write_stall_s: Number = setting(
        "TURNPIKE_WRITE_STALL_TIMEOUT_S",
        30.0,
        "Seconds a connection may keep the gateway from writing to it (a client that stopped "
        "reading) before it is aborted, and its responses stopped.",
        gt=0,
    )
    shutdown_delay_s: Number = setting(
        "TURNPIKE_SHUTDOWN_DELAY_S",
        0.0,
        "Seconds a gateway told to stop (SIGTERM) goes on serving with /readyz answering 503, "
        "so that its load balancer stops sending to it before it stops listening. Behind "
        "one: its health checks' interval times their fall count, and a margin.",
        ge=0,
        deployed=5.0,
    )
    drain_s: Number = setting(
        "TURNPIKE_GATEWAY_DRAIN_S",
        10.0,
        "Seconds a stopping gateway then lets its responses in flight finish, and its "
        "WebSockets close between responses, before it cuts what is left.",
        gt=0,
    )
    worker_silence_s: Number = setting(
        "TURNPIKE_WORKER_SILENCE_TIMEOUT_S",
        30.0,
        "Seconds a worker's stream may send nothing before the gateway cancels it and fails "
        "the response (or, before its first event, tries another worker). Above a worker's "
        "longest queue and prefill.",
        gt=0,
    )
    websocket_mode: Flag = setting(
        "TURNPIKE_WEBSOCKET_MODE",
        True,
        "Serve the Responses API's WebSocket mode. Off, every upgrade is answered 426, on "
        "which Codex moves the session to HTTP.",
    )
    ws_max_active_responses: Integer = setting(
        "TURNPIKE_WS_MAX_ACTIVE_RESPONSES", 16, "Responses one connection runs at once.", ge=1
    )
    ws_max_queued_responses: Integer = setting(
        "TURNPIKE_WS_MAX_QUEUED_RESPONSES",
        32,
        "response.create requests a connection may have waiting, each holding its parsed "
        "request; one more is refused with an error event.",
        ge=0,
    )
    ws_max_lanes: Integer = setting(
        "TURNPIKE_WS_MAX_LANES", 32, "Lanes (response chains) of one connection.", ge=1
    )
    ws_max_pending_steers: Integer = setting(
        "TURNPIKE_WS_MAX_PENDING_STEERS",
        8,
        "response.steer inputs one response may have queued; one more is refused "
        "(too_many_pending_steers).",
        ge=1,
    )
    ws_drain_idle_s: Number = setting(
        "TURNPIKE_WS_DRAIN_IDLE_S",
        2.0,
        "Seconds a stopping gateway leaves a WebSocket it finds idle to send one more "
        "response.create before it closes it (1012); a socket closes at once after a "
        "terminal event. Below TURNPIKE_GATEWAY_DRAIN_S.",
        ge=0,
    )
    ws_inject_wait_s: Number = setting(
        "TURNPIKE_WS_INJECT_WAIT_S",
        300.0,
        "Seconds a multi_agent response waits for the outputs of its calls (response.inject) "
        "before it completes with them unanswered, for the client to continue with a "
        "response.create.",
        gt=0,
    )
    ws_inject_max_steps: Integer = setting(
        "TURNPIKE_WS_INJECT_MAX_STEPS",
        64,
        "Model steps of one multi_agent response; after the last it completes, and the "
        "client continues with a response.create.",
        ge=1,
    )
    ws_max_lifetime_s: Number = setting(
        "TURNPIKE_WS_MAX_LIFETIME_S", 3600.0, "Seconds a WebSocket connection may live.", gt=0
    )
    ws_per_message_deflate: Flag = setting(
        "TURNPIKE_WS_PER_MESSAGE_DEFLATE",
        False,
        "Compress WebSocket frames when the client offers it. Off: the events are small, and "
        "compressing each costs more CPU than it saves on a data-centre network.",
    )
    ws_cache_size: Integer = setting(
        "TURNPIKE_WS_CACHE_SIZE",
        64,
        "Responses kept per connection for previous_response_id continuation.",
        ge=1,
    )
    store_max_responses: Integer = setting(
        "TURNPIKE_STORE_MAX_RESPONSES",
        100_000,
        "Responses kept by the in-memory store, oldest evicted first (about 12 KB each).",
        ge=1,
        deployed=10_000,
    )
    backend_timeout_s: Number = setting(
        "TURNPIKE_BACKEND_TIMEOUT_S",
        30.0,
        "Seconds the gateway waits for a call to safety, the tokenizer or the router.",
        gt=0,
    )
    billing_outbox_max_events: Integer = setting(
        "TURNPIKE_BILLING_OUTBOX_MAX_EVENTS",
        100_000,
        "Usage events waiting for billing (during an outage); at the bound, finishing a "
        "response waits for room instead of dropping a record.",
        ge=1,
    )
    model_cache_ttl_s: Number = setting(
        "TURNPIKE_MODEL_CACHE_TTL_S",
        30.0,
        "Seconds a model's configuration is cached before the router is asked again.",
        ge=0,
    )
    token_cache_tokens: Integer = setting(
        "TURNPIKE_TOKEN_CACHE_TOKENS",
        20_000_000,
        "Rendered tokens a gateway process keeps (4 bytes each).",
        ge=0,
    )
    redis_url: Text = setting(
        "TURNPIKE_REDIS_URL",
        "",
        "The shared response store, shared by every gateway replica. Empty: in process.",
    )
    processes: Integer = setting(
        GATEWAY_PROCESSES_VARIABLE,
        1,
        "Gateway processes on this host, sharing its port (one core each). More than one "
        "needs the shared store: a follow-up may land on any of them.",
        ge=1,
    )
    redis_store_ttl_s: Integer = setting(
        "TURNPIKE_REDIS_STORE_TTL_S",
        30 * 24 * 3600,
        "Seconds a response is kept in the shared store.",
        ge=1,
    )
    max_in_flight: Integer = setting(
        "TURNPIKE_MAX_IN_FLIGHT",
        256,
        "Responses one gateway process has in flight at most; past it a fast 503 (overload "
        "shedding). The ceiling of the adaptive bound (TURNPIKE_ADAPTIVE_*), or the bound "
        "itself with that off (then set it from `make bench-overload`). 0 turns shedding off.",
        ge=0,
    )
    session_streams: Flag = setting(
        "TURNPIKE_SESSION_STREAMS",
        False,
        "Each client connection (a WebSocket, or a chain of HTTP turns) asks safety and the "
        "tokenizer on a long-lived stream of its own instead of a call per turn; safety keeps "
        "the connection's state, so an HTTP chain's turn too sends only its new items. It "
        "moves CPU from safety and the tokenizer into the gateway (a stream message costs a "
        "grpcio client two completions, a call one): off, a call per turn "
        "(docs/benchmarks.md, session streams).",
    )
    session_streams_max: Integer = setting(
        "TURNPIKE_SESSION_STREAMS_MAX",
        1024,
        "Client connections with session streams per gateway process at most (HTTP chains' "
        "idle ones are closed first); the others ask by calls.",
        ge=1,
    )
    session_idle_s: Number = setting(
        "TURNPIKE_SESSION_IDLE_S",
        60.0,
        "Seconds a chain of HTTP turns keeps its session streams without a turn.",
        gt=0,
    )
    trace_stages: Flag = setting(
        "TURNPIKE_TRACE_STAGES",
        False,
        "With tracing on, a span for each pipeline stage of a response (its calls to the "
        "services under it), for finding where a slow turn spent its time. Off: each "
        "stage's time is an attribute of the response's span (turnpike.stage.<name>_ms), "
        "for a fraction of the CPU (docs/observability.md).",
    )
    access_log: Flag = setting(
        "TURNPIKE_ACCESS_LOG",
        True,
        "One structured line per request and per WebSocket response.create, at INFO.",
    )
    allow_pipeline_override: Flag = setting(
        "TURNPIKE_ALLOW_PIPELINE_OVERRIDE",
        False,
        "Let requests pick a pipeline with X-Turnpike-Pipeline (benchmarks; not for production).",
    )
    server_key: TrimmedText = setting(
        SERVER_KEY_VARIABLE,
        "",
        "The key that seals compaction items (base64 of 32 bytes). Empty: each process makes "
        "one at start, and sealed items open only in the process that sealed them.",
        secret=True,
    )
    endpoints: Endpoints = Field(default_factory=Endpoints)
    images: ImageresSettings = Field(default_factory=ImageresSettings)
    pdf: PdfSettings = Field(default_factory=PdfSettings)
    adaptive: AdaptiveAdmissionSettings = Field(default_factory=AdaptiveAdmissionSettings)

    def check(self) -> None:
        if self.tenants_file:
            if self.api_keys.strip():
                raise ConfigError.invalid(
                    TENANTS_FILE_VARIABLE,
                    self.tenants_file,
                    f"the tenants file replaces {API_KEYS_VARIABLE}: set only one of them",
                )
        else:
            parse_api_keys(self.api_keys)  # refused at start-up, not at the first request
        if self.server_key:
            try:
                decode_server_key(self.server_key)
            except ValueError as err:
                raise ConfigError.invalid(SERVER_KEY_VARIABLE, "(hidden)", str(err)) from None
        # A turn's message holds the conversation, and the request's own instructions and
        # tools beside it: the conversation may fill half the channel's limit at most.
        grpc_max = grpc_max_message_bytes()
        if self.max_conversation_bytes > grpc_max // 2:
            raise ConfigError.invalid(
                "TURNPIKE_MAX_CONVERSATION_BYTES",
                str(self.max_conversation_bytes),
                f"must be from 1 to half of {GRPC_MAX_MESSAGE_VARIABLE} ({grpc_max // 2})",
            )
        if self.processes > 1 and not self.redis_url:
            # Without a shared store each process keeps its own responses: an HTTP
            # follow-up that lands on another process would not find its parent.
            raise ConfigError.invalid(
                GATEWAY_PROCESSES_VARIABLE,
                str(self.processes),
                "several gateway processes need a shared response store: set TURNPIKE_REDIS_URL",
            )
