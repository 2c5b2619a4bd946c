"""All configuration, in one place, read from environment variables.

Every service reads only its own dataclass, at start-up, before it serves: a malformed
value raises ``ConfigError`` naming the variable, and the service exits 2 saying so
(``exit_on_config_error``). Defaults are the loopback layout of ``make run`` (ports:
``turnpike.catalogue``); Compose and Kubernetes override them through the environment.
"""

from __future__ import annotations

import base64
import binascii
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from turnpike.catalogue import (
    BILLING,
    GATEWAY,
    IMAGERES,
    LOOPBACK,
    ROUTER,
    SAFETY,
    TOKENIZER,
    Service,
    loopback_workers,
    service,
)

T = TypeVar("T")


class ConfigError(ValueError):
    """A setting that cannot work. The message names the variable and its value
    (``TURNPIKE_X='12k': not an integer``), so it reads well on its own: every entry
    point prints it as "<service>: configuration error: <message>" and exits 2
    (``exit_on_config_error``). Services raise it for their own checks too."""

    @classmethod
    def invalid(cls, variable: str, value: str, problem: str) -> ConfigError:
        return cls(f"{variable}={value!r}: {problem}")


@contextmanager
def exit_on_config_error(service: str) -> Iterator[None]:
    """Around a service's entry point: a ConfigError becomes one line on stderr and exit
    code 2, with no traceback (nothing in it is the code's fault)."""
    try:
        yield
    except ConfigError as exc:
        print(f"{service}: configuration error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def _read(name: str, default: T, parse: Callable[[str], T], expected: str) -> T:
    """The variable parsed, or ``default`` when it is unset or empty."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        return parse(raw.strip())
    except ValueError:
        raise ConfigError.invalid(name, raw, expected) from None


def _boolean(raw: str) -> bool:
    word = raw.lower()
    if word in ("1", "true", "yes", "on"):
        return True
    if word in ("0", "false", "no", "off"):
        return False
    raise ValueError(raw)


def _port(raw: str) -> int:
    port = int(raw)
    if not 1 <= port <= 65535:
        raise ValueError(raw)
    return port


def _address(raw: str) -> str:
    host, colon, port = raw.rpartition(":")
    if not colon or not host:
        raise ValueError(raw)
    _port(port)
    return raw


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


LOG_LEVEL_VARIABLE = "TURNPIKE_LOG_LEVEL"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def log_level() -> int:
    """``TURNPIKE_LOG_LEVEL``, every service's logging level: DEBUG, INFO (the default),
    WARNING or ERROR. DEBUG includes the libraries' own debug lines."""
    raw = env_str(LOG_LEVEL_VARIABLE, "INFO").strip().upper() or "INFO"
    if raw not in LOG_LEVELS:
        raise ConfigError.invalid(LOG_LEVEL_VARIABLE, raw, f"not one of {', '.join(LOG_LEVELS)}")
    return logging.getLevelNamesMapping()[raw]


def env_int(name: str, default: int) -> int:
    return _read(name, default, int, "not an integer")


def env_float(name: str, default: float) -> float:
    return _read(name, default, float, "not a number")


def env_bool(name: str, default: bool) -> bool:
    return _read(name, default, _boolean, "not a boolean (true/false, yes/no, on/off, 1/0)")


def env_port(name: str, default: int) -> int:
    return _read(name, default, _port, "not a port (1-65535)")


def env_address(name: str, default: str) -> str:
    """A "host:port" another service listens on."""
    return _read(name, default, _address, "not host:port")


def env_list(name: str, default: str) -> list[str]:
    return [part.strip() for part in env_str(name, default).split(",") if part.strip()]


# The development key, tenant "dev": what make run accepts unless told otherwise.
DEV_API_KEY = "sk-turnpike-dev"
DEFAULT_API_KEYS = f"{DEV_API_KEY}:dev"
API_KEYS_VARIABLE = "TURNPIKE_API_KEYS"
# A YAML file of tenants, their key hashes and limits (gateway.tenants); it replaces
# TURNPIKE_API_KEYS.
TENANTS_FILE_VARIABLE = "TURNPIKE_TENANTS_FILE"


def _default_api_keys() -> str:
    """``TURNPIKE_API_KEYS`` as set; unset, the development key, unless a tenants file
    replaces the keys (the file alone says who may call)."""
    tenants_file = os.environ.get(TENANTS_FILE_VARIABLE, "").strip()
    return env_str(API_KEYS_VARIABLE, "" if tenants_file else DEFAULT_API_KEYS)


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


# The source checkout this package runs from (services/turnpike/config.py is two down).
_CHECKOUT = Path(__file__).resolve().parents[2]


def default_state_dir() -> Path:
    """Where processes keep what they write unless a variable says otherwise: var/ at
    the top of the source checkout (make run and the tests), or the user's state folder
    when the package runs from elsewhere. Never relative to the working folder."""
    if (_CHECKOUT / "pyproject.toml").is_file():
        return _CHECKOUT / "var"
    return Path.home() / ".local" / "state" / "turnpike"


def vocab_dir_in(state_dir: Path) -> Path:
    return state_dir / "vocab"


def ledger_path_in(state_dir: Path) -> Path:
    return state_dir / "billing" / "ledger.sqlite3"


def env_path(name: str, default: Callable[[Path], Path]) -> str:
    """A path from the variable, else ``default`` of the default state folder (worked
    out only then: the containers set every path)."""
    raw = os.environ.get(name, "").strip()
    return raw or str(default(default_state_dir()))


def _address_of(backend: Service) -> Callable[[], str]:
    """Reads where the gateway finds ``backend`` (one of the catalogue's BACKENDS)."""
    variable = backend.address_variable
    if variable is None:
        raise ValueError(f"the gateway does not call {backend.name} directly")
    return lambda: env_address(variable, backend.loopback_address)


@dataclass(frozen=True)
class Endpoints:
    """Where each backend service listens (host:port)."""

    safety: str = field(default_factory=_address_of(SAFETY))
    tokenizer: str = field(default_factory=_address_of(TOKENIZER))
    router: str = field(default_factory=_address_of(ROUTER))
    billing: str = field(default_factory=_address_of(BILLING))
    imageres: str = field(default_factory=_address_of(IMAGERES))


GRPC_MAX_MESSAGE_VARIABLE = "TURNPIKE_GRPC_MAX_MESSAGE_BYTES"


def grpc_max_message_bytes() -> int:
    """The largest gRPC message a service sends or receives, both ends of every channel
    (``turnpike.grpc_client`` and ``turnpike.grpc_server``)."""
    return env_int(GRPC_MAX_MESSAGE_VARIABLE, 64 * 1024 * 1024)


@dataclass(frozen=True)
class GrpcServerSettings:
    """Common to every backend service."""

    port: int
    # Where /metrics is served (turnpike.metrics); 0 picks no port: no metrics listener.
    metrics_port: int = 0
    host: str = field(default_factory=lambda: env_str("TURNPIKE_GRPC_HOST", LOOPBACK))
    # Seconds in-flight calls get to finish after SIGTERM.
    shutdown_grace_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_SHUTDOWN_GRACE_S", 5.0)
    )
    max_message_bytes: int = field(default_factory=grpc_max_message_bytes)

    @classmethod
    def for_service(cls, name: str) -> GrpcServerSettings:
        """The settings of the catalogue's service ``name`` (its own port variable)."""
        listed = service(name)
        return cls(
            port=env_port(listed.port_variable, listed.port),
            metrics_port=env_port(listed.metrics_port_variable, listed.metrics_port),
        )


@dataclass(frozen=True)
class ImageresSettings:
    """Image resolution's limits: the imageres service's, and the gateway's, which
    resolves images in process on the sprint and connection pipelines."""

    # Decoded size limit per image; larger images get a per-image error, not an RPC failure.
    max_image_bytes: int = field(
        default_factory=lambda: env_int("TURNPIKE_IMAGERES_MAX_IMAGE_BYTES", 20 * 1024 * 1024)
    )
    # Pixel limit per image: bounds the memory a full decode can take (a tiny file can
    # declare huge dimensions).
    max_image_pixels: int = field(
        default_factory=lambda: env_int("TURNPIKE_IMAGERES_MAX_IMAGE_PIXELS", 8192 * 8192)
    )
    # Pixels all the images one request resolves may declare together (a follow-up's
    # history included where it is resolved again), summed from their headers and
    # refused (400 images_too_large) before any is decoded: bounds a request's decoding
    # time as the per-image limit bounds its memory. The default fits one largest image.
    max_request_pixels: int = field(
        default_factory=lambda: env_int("TURNPIKE_IMAGERES_MAX_REQUEST_PIXELS", 8192 * 8192)
    )

    def __post_init__(self) -> None:
        if self.max_request_pixels < 1:
            raise ConfigError.invalid(
                "TURNPIKE_IMAGERES_MAX_REQUEST_PIXELS",
                str(self.max_request_pixels),
                "must be at least 1",
            )


@dataclass(frozen=True)
class PdfSettings:
    """The gateway's PDF text workers (gateway.pdf_pool): processes of their own, each
    reading one PDF at a time under kernel limits, so a PDF built to be expensive costs
    only its own request (README, "Input files")."""

    # Worker processes per gateway process (PDFs read at once), and PDFs that may wait
    # for one; one more is refused at once (503 server_overloaded).
    workers: int = field(default_factory=lambda: env_int("TURNPIKE_PDF_WORKERS", 2))
    queue: int = field(default_factory=lambda: env_int("TURNPIKE_PDF_QUEUE", 16))
    # Per PDF: CPU seconds (RLIMIT_CPU) and wall-clock seconds (then the worker is
    # killed and replaced); per worker: its address space (RLIMIT_AS). A 100-page text
    # PDF takes about 0.3 s and 25 MiB resident (bench/results/pdf-extraction.md).
    cpu_s: int = field(default_factory=lambda: env_int("TURNPIKE_PDF_CPU_S", 5))
    timeout_s: float = field(default_factory=lambda: env_float("TURNPIKE_PDF_TIMEOUT_S", 10.0))
    memory_mb: int = field(default_factory=lambda: env_int("TURNPIKE_PDF_MEMORY_MB", 256))
    # Pages per PDF, and characters of text from all the PDFs of one request.
    max_pages: int = field(default_factory=lambda: env_int("TURNPIKE_PDF_MAX_PAGES", 100))
    max_chars: int = field(default_factory=lambda: env_int("TURNPIKE_PDF_MAX_CHARS", 200_000))

    def __post_init__(self) -> None:
        for variable, value in (
            ("TURNPIKE_PDF_WORKERS", self.workers),
            ("TURNPIKE_PDF_CPU_S", self.cpu_s),
            ("TURNPIKE_PDF_TIMEOUT_S", self.timeout_s),
            ("TURNPIKE_PDF_MEMORY_MB", self.memory_mb),
            ("TURNPIKE_PDF_MAX_PAGES", self.max_pages),
            ("TURNPIKE_PDF_MAX_CHARS", self.max_chars),
        ):
            if value <= 0:
                raise ConfigError.invalid(variable, str(value), "must be above 0")
        if self.queue < 0:
            raise ConfigError.invalid("TURNPIKE_PDF_QUEUE", str(self.queue), "must be 0 or more")


GATEWAY_PROCESSES_VARIABLE = "TURNPIKE_GATEWAY_PROCESSES"
SERVER_KEY_VARIABLE = "TURNPIKE_SERVER_KEY"
SERVER_KEY_BYTES = 32


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


@dataclass(frozen=True)
class GatewaySettings:
    host: str = field(default_factory=lambda: env_str("TURNPIKE_GATEWAY_HOST", LOOPBACK))
    port: int = field(default_factory=lambda: env_port(GATEWAY.port_variable, GATEWAY.port))
    # /metrics, on a port of its own (served by the parent when there are several processes).
    metrics_port: int = field(
        default_factory=lambda: env_port(GATEWAY.metrics_port_variable, GATEWAY.metrics_port)
    )
    # "key:tenant" pairs, comma separated (parse_api_keys). The development key works
    # out of the box.
    api_keys: str = field(default_factory=_default_api_keys)
    # The tenants file (gateway.tenants: key hashes and limits per tenant), read at start
    # and on SIGHUP. Set, it replaces api_keys, which must then be empty or unset.
    tenants_file: str = field(default_factory=lambda: env_str(TENANTS_FILE_VARIABLE, "").strip())
    default_model: str = field(
        default_factory=lambda: env_str("TURNPIKE_DEFAULT_MODEL", "turnpike-sim")
    )
    max_body_bytes: int = field(
        default_factory=lambda: env_int("TURNPIKE_MAX_BODY_BYTES", 8 * 1024 * 1024)
    )
    max_frame_bytes: int = field(
        default_factory=lambda: env_int("TURNPIKE_MAX_FRAME_BYTES", 8 * 1024 * 1024)
    )
    # Characters of text a create request may hold in all its strings (input,
    # instructions, tools), checked before any backend sees it (gateway.bounds). The
    # default is a 131,072-token context window at 8 characters a token, twice what
    # English averages: an input over it would not fit the window anyway, and it keeps
    # the tokenizer's work per request to about a second at worst.
    max_input_chars: int = field(
        default_factory=lambda: env_int("TURNPIKE_MAX_INPUT_CHARS", 1024 * 1024)
    )
    # A conversation's bounds (gateway.conversation_bounds): its items, and their bytes as
    # stored (compact JSON). Every turn sends the whole conversation to the backends; 8 MiB
    # is what a stateless client may send in one body, far past any context window's text,
    # and keeps a turn's gRPC messages well under TURNPIKE_GRPC_MAX_MESSAGE_BYTES. 10,000
    # items is a long agent session's tool calls several times over.
    max_conversation_items: int = field(
        default_factory=lambda: env_int("TURNPIKE_MAX_CONVERSATION_ITEMS", 10_000)
    )
    max_conversation_bytes: int = field(
        default_factory=lambda: env_int("TURNPIKE_MAX_CONVERSATION_BYTES", 8 * 1024 * 1024)
    )
    # Seconds a client has to send a request's head (request line and headers, also of
    # a WebSocket upgrade) once it connects or starts a request; past it the connection
    # is closed (408). Slow-header (slowloris) clients cannot hold connections forever.
    header_timeout_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_HEADER_TIMEOUT_S", 10.0)
    )
    # Seconds a connection may keep the gateway from writing to it (a client that stopped
    # reading its SSE stream or socket) before it is aborted, and its responses stopped.
    write_stall_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_WRITE_STALL_TIMEOUT_S", 30.0)
    )
    # Seconds a worker's stream may send nothing before the gateway cancels it and fails
    # the response (or, before its first event, tries another worker): a worker cut off
    # the network mid-stream would otherwise hold the response for as long as TCP waits.
    # Above a worker's longest queue and prefill.
    worker_silence_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_WORKER_SILENCE_TIMEOUT_S", 30.0)
    )
    # Serve the Responses API's WebSocket mode. Off, every upgrade is answered 426: the
    # status on which Codex moves the session to HTTP (404, 405 and 503 make it retry).
    websocket_mode: bool = field(default_factory=lambda: env_bool("TURNPIKE_WEBSOCKET_MODE", True))
    ws_max_active_responses: int = field(
        default_factory=lambda: env_int("TURNPIKE_WS_MAX_ACTIVE_RESPONSES", 16)
    )
    # response.create requests a connection may have waiting (behind a busy lane, or for
    # one of the active slots); one more is refused with an error event. Each holds a
    # parsed request (up to max_frame_bytes), so the bound is one on memory too.
    ws_max_queued_responses: int = field(
        default_factory=lambda: env_int("TURNPIKE_WS_MAX_QUEUED_RESPONSES", 32)
    )
    ws_max_lanes: int = field(default_factory=lambda: env_int("TURNPIKE_WS_MAX_LANES", 32))
    ws_max_lifetime_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_WS_MAX_LIFETIME_S", 3600.0)
    )
    # Compress WebSocket frames when the client offers it (permessage-deflate). Off by
    # default: the events are small, and compressing each costs more CPU than the bytes
    # it saves on a data-centre network (README, capacity).
    ws_per_message_deflate: bool = field(
        default_factory=lambda: env_bool("TURNPIKE_WS_PER_MESSAGE_DEFLATE", False)
    )
    # Responses kept per connection for previous_response_id continuation.
    ws_cache_size: int = field(default_factory=lambda: env_int("TURNPIKE_WS_CACHE_SIZE", 64))
    # Responses kept by the in-memory store (oldest evicted first).
    store_max_responses: int = field(
        default_factory=lambda: env_int("TURNPIKE_STORE_MAX_RESPONSES", 100_000)
    )
    backend_timeout_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_BACKEND_TIMEOUT_S", 30.0)
    )
    # Usage events waiting for billing (during an outage); at the bound, finishing a
    # response waits for room instead of dropping a record.
    billing_outbox_max_events: int = field(
        default_factory=lambda: env_int("TURNPIKE_BILLING_OUTBOX_MAX_EVENTS", 100_000)
    )
    # Sprint caches: model configurations (seconds before asking the router again) and
    # rendered tokens (how many tokens the process keeps, 4 bytes each).
    model_cache_ttl_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_MODEL_CACHE_TTL_S", 30.0)
    )
    token_cache_tokens: int = field(
        default_factory=lambda: env_int("TURNPIKE_TOKEN_CACHE_TOKENS", 20_000_000)
    )
    # The optional shared tier: with a Redis URL, responses are stored there (shared by
    # every gateway replica) for ``redis_store_ttl_s``; empty keeps them in process.
    redis_url: str = field(default_factory=lambda: env_str("TURNPIKE_REDIS_URL", ""))
    # Gateway processes on this host, sharing its port (one Python process uses one
    # core). More than one needs the shared store: a follow-up may land on any of them.
    processes: int = field(default_factory=lambda: env_int(GATEWAY_PROCESSES_VARIABLE, 1))
    redis_store_ttl_s: int = field(
        default_factory=lambda: env_int("TURNPIKE_REDIS_STORE_TTL_S", 30 * 24 * 3600)
    )
    # Responses one gateway process has in flight at most; past it a fast 503 (overload
    # shedding, gateway.shedding). 0 turns it off. The default comes from the capacity
    # measured by `make bench-overload` (README, "Fairness and overload").
    max_in_flight: int = field(default_factory=lambda: env_int("TURNPIKE_MAX_IN_FLIGHT", 64))
    # One structured line per request and per WebSocket response.create (gateway.access_log).
    access_log: bool = field(default_factory=lambda: env_bool("TURNPIKE_ACCESS_LOG", True))
    # Let requests pick a pipeline with X-Turnpike-Pipeline (benchmarks; not for production).
    allow_pipeline_override: bool = field(
        default_factory=lambda: env_bool("TURNPIKE_ALLOW_PIPELINE_OVERRIDE", False)
    )
    # The key that seals compaction items (base64 of 32 bytes). Unset, each process makes
    # one at start: sealed items then open only in the process that sealed them.
    server_key: str = field(default_factory=lambda: env_str(SERVER_KEY_VARIABLE, "").strip())
    endpoints: Endpoints = field(default_factory=Endpoints)
    images: ImageresSettings = field(default_factory=ImageresSettings)
    pdf: PdfSettings = field(default_factory=PdfSettings)

    def __post_init__(self) -> None:
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
        if self.max_in_flight < 0:
            raise ConfigError.invalid(
                "TURNPIKE_MAX_IN_FLIGHT", str(self.max_in_flight), "must be 0 (off) or more"
            )
        if self.max_input_chars < 1:
            raise ConfigError.invalid(
                "TURNPIKE_MAX_INPUT_CHARS", str(self.max_input_chars), "must be at least 1"
            )
        if self.max_conversation_items < 1:
            raise ConfigError.invalid(
                "TURNPIKE_MAX_CONVERSATION_ITEMS",
                str(self.max_conversation_items),
                "must be at least 1",
            )
        # A turn's message holds the conversation, and the request's own instructions and
        # tools beside it: the conversation may fill half the channel's limit at most.
        grpc_max = grpc_max_message_bytes()
        if not 1 <= self.max_conversation_bytes <= grpc_max // 2:
            raise ConfigError.invalid(
                "TURNPIKE_MAX_CONVERSATION_BYTES",
                str(self.max_conversation_bytes),
                f"must be from 1 to half of {GRPC_MAX_MESSAGE_VARIABLE} ({grpc_max // 2})",
            )
        if self.write_stall_s <= 0:
            raise ConfigError.invalid(
                "TURNPIKE_WRITE_STALL_TIMEOUT_S", str(self.write_stall_s), "must be above 0"
            )
        if self.worker_silence_s <= 0:
            raise ConfigError.invalid(
                "TURNPIKE_WORKER_SILENCE_TIMEOUT_S", str(self.worker_silence_s), "must be above 0"
            )
        if self.header_timeout_s <= 0:
            raise ConfigError.invalid(
                "TURNPIKE_HEADER_TIMEOUT_S", str(self.header_timeout_s), "must be above 0"
            )
        if self.processes < 1:
            raise ConfigError.invalid(
                GATEWAY_PROCESSES_VARIABLE, str(self.processes), "must be at least 1"
            )
        if self.processes > 1 and not self.redis_url:
            # Without a shared store each process keeps its own responses: an HTTP
            # follow-up that lands on another process would not find its parent.
            raise ConfigError.invalid(
                GATEWAY_PROCESSES_VARIABLE,
                str(self.processes),
                "several gateway processes need a shared response store: set TURNPIKE_REDIS_URL",
            )


@dataclass(frozen=True)
class RouterSettings:
    # Inference workers as "id=host:port", comma separated (default: make run's two).
    workers: list[str] = field(
        default_factory=lambda: env_list(
            "TURNPIKE_WORKERS",
            ",".join(f"{wid}={LOOPBACK}:{port}" for wid, port in loopback_workers(2).items()),
        )
    )
    models_file: str = field(default_factory=lambda: env_str("TURNPIKE_MODELS_FILE", ""))
    health_interval_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_ROUTER_HEALTH_INTERVAL_S", 1.0)
    )
    # Conversations remembered for worker affinity (least recently used forgotten first).
    affinity_capacity: int = field(
        default_factory=lambda: env_int("TURNPIKE_ROUTER_AFFINITY_CAPACITY", 100_000)
    )
    # Load of a worker = weighted routes it was given in this many recent seconds.
    load_window_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_ROUTER_LOAD_WINDOW_S", 10.0)
    )


@dataclass(frozen=True)
class WorkerSettings:
    worker_id: str = field(default_factory=lambda: env_str("TURNPIKE_WORKER_ID", "worker-1"))
    # Prefix KV cache size, in prompt tokens (64-token blocks, least recently used evicted).
    cache_tokens: int = field(
        default_factory=lambda: env_int("TURNPIKE_WORKER_CACHE_TOKENS", 2_000_000)
    )
    # Fault knobs for tests, off by default. Fraction of requests answered with a
    # "model_error" Error event instead of output:
    error_rate: float = field(default_factory=lambda: env_float("TURNPIKE_WORKER_ERROR_RATE", 0.0))
    # > 0: stop emitting after this many output tokens and hang until the caller cancels.
    stall_after_tokens: int = field(
        default_factory=lambda: env_int("TURNPIKE_WORKER_STALL_AFTER_TOKENS", 0)
    )
    # The simulator's stream interval: after the first token (always alone), one delta
    # per this many ms of decode, at most DELTA_MAX_TOKENS tokens. 0 sends every token as
    # it is due. Serving stacks do the same to cut per-message cost (vLLM's and
    # TensorRT-LLM's stream interval); the time to first token and the rate are unchanged.
    delta_interval_ms: float = field(
        default_factory=lambda: env_float("TURNPIKE_WORKER_DELTA_INTERVAL_MS", 20.0)
    )
    delta_max_tokens: int = field(
        default_factory=lambda: env_int("TURNPIKE_WORKER_DELTA_MAX_TOKENS", 20)
    )
    # The Cerebras backend exists only when a key is set. Both names are the Cerebras
    # SDK's own; an empty base URL means the SDK's default (the public API).
    cerebras_api_key: str = field(
        default_factory=lambda: env_str("CEREBRAS_API_KEY", ""), repr=False
    )
    cerebras_base_url: str = field(default_factory=lambda: env_str("CEREBRAS_BASE_URL", ""))
    # Retries of a rate-limited (429) request before its first output.
    cerebras_max_retries: int = field(
        default_factory=lambda: env_int("TURNPIKE_CEREBRAS_MAX_RETRIES", 3)
    )
    # Bounds each wait on the backend (connect, and each read of the stream), not the
    # whole generation.
    cerebras_timeout_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_CEREBRAS_TIMEOUT_S", 60.0)
    )
    # The OpenAI-compatible backend (a vLLM, SGLang or llama.cpp server) exists only when
    # its base URL is set, with the /v1 (http://vllm:8000/v1). The key may stay empty for
    # a server started without one. The model is the server's name for it; empty: the
    # router's model id is sent as is.
    openai_compat_base_url: str = field(
        default_factory=lambda: env_str("TURNPIKE_OPENAI_COMPAT_BASE_URL", "")
    )
    openai_compat_api_key: str = field(
        default_factory=lambda: env_str("TURNPIKE_OPENAI_COMPAT_API_KEY", ""), repr=False
    )
    openai_compat_model: str = field(
        default_factory=lambda: env_str("TURNPIKE_OPENAI_COMPAT_MODEL", "")
    )
    # As for Cerebras: retries of a 429 before the first output; the wait bound per read.
    openai_compat_max_retries: int = field(
        default_factory=lambda: env_int("TURNPIKE_OPENAI_COMPAT_MAX_RETRIES", 3)
    )
    openai_compat_timeout_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_OPENAI_COMPAT_TIMEOUT_S", 60.0)
    )
    # A cache_salt per tenant on every request (vLLM's prefix-cache isolation); off for a
    # server that refuses the field.
    openai_compat_cache_salt: bool = field(
        default_factory=lambda: env_bool("TURNPIKE_OPENAI_COMPAT_CACHE_SALT", True)
    )

    def __post_init__(self) -> None:
        if self.delta_interval_ms < 0:
            raise ConfigError.invalid(
                "TURNPIKE_WORKER_DELTA_INTERVAL_MS", str(self.delta_interval_ms), "must be >= 0"
            )
        if self.delta_max_tokens < 1:
            raise ConfigError.invalid(
                "TURNPIKE_WORKER_DELTA_MAX_TOKENS", str(self.delta_max_tokens), "must be >= 1"
            )


@dataclass(frozen=True)
class BillingSettings:
    ledger_path: str = field(
        default_factory=lambda: env_path("TURNPIKE_BILLING_LEDGER", ledger_path_in)
    )


@dataclass(frozen=True)
class TokenizerSettings:
    # Where the o200k vocabulary is unpacked from its package for the harmony renderer.
    vocab_dir: str = field(default_factory=lambda: env_path("TURNPIKE_VOCAB_DIR", vocab_dir_in))
    # Characters of text one render may hold (a whole conversation: instructions, tools
    # and items); over it, RESOURCE_EXHAUSTED before any encoding. Long text is encoded
    # in bounded pieces (turnpike.token_pieces), about a second per million characters at
    # worst, so this bounds a request's time, and its memory (a token list of up to one
    # token per character), too. Twice the gateway's TURNPIKE_MAX_INPUT_CHARS: a whole
    # conversation this long could not fit a 131,072-token context window.
    max_chars: int = field(
        default_factory=lambda: env_int("TURNPIKE_TOKENIZER_MAX_CHARS", 2 * 1024 * 1024)
    )


@dataclass(frozen=True)
class SafetySettings:
    # Classifier score (0..1) at or above which a conversation is flagged.
    flag_threshold: float = field(
        default_factory=lambda: env_float("TURNPIKE_SAFETY_FLAG_THRESHOLD", 0.8)
    )
    # Score at or above which a user message blocks the conversation.
    block_threshold: float = field(
        default_factory=lambda: env_float("TURNPIKE_SAFETY_BLOCK_THRESHOLD", 0.98)
    )
    # Conversations whose incremental state is kept (least recently used forgotten first).
    state_max_conversations: int = field(
        default_factory=lambda: env_int("TURNPIKE_SAFETY_STATE_MAX_CONVERSATIONS", 10_000)
    )
