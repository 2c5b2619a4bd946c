"""Settings more than one service reads: logging, gRPC, where state is kept, and the
image limits the gateway shares with imageres. Declared with ``turnpike.config_model``;
services import them from ``turnpike.config``."""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

from pydantic import Field, create_model

from turnpike.catalogue import GATEWAY, LOOPBACK, SERVICES, Service, service
from turnpike.config_model import (
    ConfigError,
    EnvSettings,
    Integer,
    Number,
    Port,
    Text,
    one_of,
    setting,
)

EVERY_SERVICE = tuple(s.name for s in SERVICES)
# The gRPC servers: every service but the gateway.
GRPC_SERVICES = tuple(s.name for s in SERVICES if s is not GATEWAY)

LOG_LEVEL_VARIABLE = "TURNPIKE_LOG_LEVEL"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
GRPC_MAX_MESSAGE_VARIABLE = "TURNPIKE_GRPC_MAX_MESSAGE_BYTES"


class LoggingSettings(EnvSettings):
    readers = EVERY_SERVICE

    level: one_of(*LOG_LEVELS) = setting(  # type: ignore[valid-type]
        LOG_LEVEL_VARIABLE,
        "INFO",
        "Every service's logging level, in any case. DEBUG includes the libraries' own "
        "debug lines; no level logs a secret.",
    )


def log_level() -> int:
    """``TURNPIKE_LOG_LEVEL`` as a ``logging`` level."""
    return logging.getLevelNamesMapping()[LoggingSettings().level]


class GrpcChannelSettings(EnvSettings):
    readers = EVERY_SERVICE

    max_message_bytes: Integer = setting(
        GRPC_MAX_MESSAGE_VARIABLE,
        64 * 1024 * 1024,
        "The largest gRPC message a service sends or receives, at both ends of every "
        "channel (turnpike.grpc_client and turnpike.grpc_server).",
        ge=1,
    )


def grpc_max_message_bytes() -> int:
    return GrpcChannelSettings().max_message_bytes


class GrpcServerSettings(EnvSettings):
    """Common to every backend service; ``for_service`` adds the service's own ports."""

    readers = GRPC_SERVICES

    # Given by for_service (the catalogue's port variables); 0: no metrics listener.
    port: int = 0
    metrics_port: int = 0
    host: Text = setting(
        "TURNPIKE_GRPC_HOST", LOOPBACK, "The address every gRPC service listens on."
    )
    shutdown_grace_s: Number = setting(
        "TURNPIKE_SHUTDOWN_GRACE_S",
        5.0,
        "Seconds in-flight calls get to finish after SIGTERM.",
        ge=0,
    )
    max_message_bytes: int = Field(default_factory=grpc_max_message_bytes)
    max_sessions: Integer = setting(
        "TURNPIKE_GRPC_MAX_SESSIONS",
        4096,
        "Session streams (one per client connection, from the gateway to safety and the "
        "tokenizer) one service process keeps open at most; past it a new one is refused "
        "and the gateway asks by calls.",
        ge=1,
    )

    @classmethod
    def for_service(cls, name: str) -> GrpcServerSettings:
        """The settings of the catalogue's service ``name`` (its own port variables)."""
        return server_settings_class(service(name))()


@functools.cache
def server_settings_class(listed: Service) -> type[GrpcServerSettings]:
    """GrpcServerSettings with ``listed``'s port variables (the catalogue's)."""
    fields: dict[str, Any] = {
        "port": (Port, port_setting(listed)),
        "metrics_port": (Port, metrics_port_setting(listed)),
    }
    made = create_model(
        f"{listed.name.capitalize()}ServerSettings", __base__=GrpcServerSettings, **fields
    )
    made.readers = (listed.name,)
    return made


def port_setting(listed: Service) -> Any:
    return setting(
        listed.port_variable,
        listed.port,
        f"Where {listed.name} listens (src/turnpike/catalogue.py).",
    )


def metrics_port_setting(listed: Service) -> Any:
    return setting(
        listed.metrics_port_variable,
        listed.metrics_port,
        f"Where {listed.name} serves /metrics, a port of its own.",
    )


class ImageresSettings(EnvSettings):
    """Image resolution's limits: the imageres service's, and the gateway's, which
    resolves images in process on the sprint and connection pipelines."""

    readers = ("gateway", "imageres")

    max_image_bytes: Integer = setting(
        "TURNPIKE_IMAGERES_MAX_IMAGE_BYTES",
        20 * 1024 * 1024,
        "Decoded size limit per image; a larger image gets a per-image error, not an RPC failure.",
        ge=1,
    )
    max_image_pixels: Integer = setting(
        "TURNPIKE_IMAGERES_MAX_IMAGE_PIXELS",
        8192 * 8192,
        "Pixel limit per image: bounds the memory a full decode can take (a tiny file can "
        "declare huge dimensions).",
        ge=1,
        deployed=4096 * 4096,
    )
    max_request_pixels: Integer = setting(
        "TURNPIKE_IMAGERES_MAX_REQUEST_PIXELS",
        8192 * 8192,
        "Pixels all the images of one request may declare together (a follow-up's history "
        "included where it is resolved again), summed from their headers and refused (400 "
        "images_too_large) before any is decoded: bounds a request's decoding time as the "
        "per-image limit bounds its memory. The default fits one largest image.",
        ge=1,
    )


# -- where processes keep what they write ------------------------------------------------------

# The source checkout this package runs from (src/turnpike/ is two down).
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


STATE_DIR_TEXT = "var/ in the checkout, else ~/.local/state/turnpike"

__all__ = [
    "EVERY_SERVICE",
    "GRPC_MAX_MESSAGE_VARIABLE",
    "GRPC_SERVICES",
    "LOG_LEVELS",
    "LOG_LEVEL_VARIABLE",
    "STATE_DIR_TEXT",
    "ConfigError",
    "GrpcChannelSettings",
    "GrpcServerSettings",
    "ImageresSettings",
    "LoggingSettings",
    "default_state_dir",
    "grpc_max_message_bytes",
    "ledger_path_in",
    "log_level",
    "server_settings_class",
    "vocab_dir_in",
]
