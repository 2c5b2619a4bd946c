"""All configuration, in one place, read from environment variables.

Every service reads only its own dataclass. Defaults are the loopback layout of
``make run``; Compose and Kubernetes override them through the environment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def env_str(name: str, default: str) -> str:
    return os.environ.get(name, default)


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    return int(raw) if raw not in (None, "") else default


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    return float(raw) if raw not in (None, "") else default


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    return raw.strip().lower() in ("1", "true", "yes", "on")


def env_list(name: str, default: str) -> list[str]:
    return [part.strip() for part in env_str(name, default).split(",") if part.strip()]


@dataclass(frozen=True)
class Endpoints:
    """Where each backend service listens (host:port)."""

    safety: str = field(default_factory=lambda: env_str("TURNPIKE_SAFETY_ADDR", "127.0.0.1:50051"))
    tokenizer: str = field(
        default_factory=lambda: env_str("TURNPIKE_TOKENIZER_ADDR", "127.0.0.1:50052")
    )
    router: str = field(default_factory=lambda: env_str("TURNPIKE_ROUTER_ADDR", "127.0.0.1:50053"))
    billing: str = field(default_factory=lambda: env_str("TURNPIKE_BILLING_ADDR", "127.0.0.1:50054"))
    imageres: str = field(
        default_factory=lambda: env_str("TURNPIKE_IMAGERES_ADDR", "127.0.0.1:50055")
    )


@dataclass(frozen=True)
class GrpcServerSettings:
    """Common to every backend service."""

    port: int
    host: str = field(default_factory=lambda: env_str("TURNPIKE_GRPC_HOST", "127.0.0.1"))
    # Seconds in-flight calls get to finish after SIGTERM.
    shutdown_grace_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_SHUTDOWN_GRACE_S", 5.0)
    )
    max_message_bytes: int = field(
        default_factory=lambda: env_int("TURNPIKE_GRPC_MAX_MESSAGE_BYTES", 64 * 1024 * 1024)
    )

    @classmethod
    def for_service(cls, env_port: str, default_port: int) -> GrpcServerSettings:
        return cls(port=env_int(env_port, default_port))


@dataclass(frozen=True)
class GatewaySettings:
    host: str = field(default_factory=lambda: env_str("TURNPIKE_GATEWAY_HOST", "127.0.0.1"))
    port: int = field(default_factory=lambda: env_int("TURNPIKE_GATEWAY_PORT", 8080))
    # "key:tenant" pairs, comma separated. The development key works out of the box.
    api_keys: str = field(
        default_factory=lambda: env_str("TURNPIKE_API_KEYS", "sk-turnpike-dev:dev")
    )
    default_model: str = field(
        default_factory=lambda: env_str("TURNPIKE_DEFAULT_MODEL", "turnpike-sim")
    )
    max_body_bytes: int = field(
        default_factory=lambda: env_int("TURNPIKE_MAX_BODY_BYTES", 8 * 1024 * 1024)
    )
    max_frame_bytes: int = field(
        default_factory=lambda: env_int("TURNPIKE_MAX_FRAME_BYTES", 8 * 1024 * 1024)
    )
    ws_max_active_responses: int = field(
        default_factory=lambda: env_int("TURNPIKE_WS_MAX_ACTIVE_RESPONSES", 16)
    )
    ws_max_lanes: int = field(default_factory=lambda: env_int("TURNPIKE_WS_MAX_LANES", 32))
    ws_max_lifetime_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_WS_MAX_LIFETIME_S", 3600.0)
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
    endpoints: Endpoints = field(default_factory=Endpoints)


@dataclass(frozen=True)
class RouterSettings:
    # Inference workers as "id=host:port", comma separated.
    workers: list[str] = field(
        default_factory=lambda: env_list(
            "TURNPIKE_WORKERS", "worker-1=127.0.0.1:50061,worker-2=127.0.0.1:50062"
        )
    )
    models_file: str = field(default_factory=lambda: env_str("TURNPIKE_MODELS_FILE", ""))
    health_interval_s: float = field(
        default_factory=lambda: env_float("TURNPIKE_ROUTER_HEALTH_INTERVAL_S", 1.0)
    )


@dataclass(frozen=True)
class WorkerSettings:
    worker_id: str = field(default_factory=lambda: env_str("TURNPIKE_WORKER_ID", "worker-1"))


@dataclass(frozen=True)
class BillingSettings:
    ledger_path: str = field(
        default_factory=lambda: env_str("TURNPIKE_BILLING_LEDGER", "var/billing/ledger.sqlite3")
    )


@dataclass(frozen=True)
class TokenizerSettings:
    # Where the o200k vocabulary is unpacked from its package for the harmony renderer.
    vocab_dir: str = field(default_factory=lambda: env_str("TURNPIKE_VOCAB_DIR", "var/vocab"))
