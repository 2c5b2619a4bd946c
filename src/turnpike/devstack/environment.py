"""Each process's environment, and where a stack's clients reach it: what ``make run``
and the test fixtures agree on, computed from the layout alone (no process runs)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from turnpike.catalogue import BACKENDS, GATEWAY
from turnpike.config import (
    API_KEYS_VARIABLE,
    DEFAULT_API_KEYS,
    TENANTS_FILE_VARIABLE,
    parse_api_keys,
)
from turnpike.devstack.layout import ServiceSpec, StackConfig, program


def stack_env(config: StackConfig) -> dict[str, str]:
    """The wiring every process shares: where each service listens, and the state folder."""
    env = {
        "PYTHONUNBUFFERED": "1",
        "TURNPIKE_GRPC_HOST": config.host,
        "TURNPIKE_GATEWAY_HOST": config.host,
        GATEWAY.port_variable: str(config.gateway_port),
        "TURNPIKE_WORKERS": ",".join(f"{w}={a}" for w, a in config.worker_addresses().items()),
        "TURNPIKE_BILLING_LEDGER": str(config.ledger_path),
        "TURNPIKE_VOCAB_DIR": str(config.vocab_dir),
        # A development stack lets benchmarks pick a pipeline per request.
        "TURNPIKE_ALLOW_PIPELINE_OVERRIDE": "true",
    }
    for backend in BACKENDS:
        assert backend.address_variable is not None  # what makes it one of BACKENDS
        port = config.port(backend.name)
        env[backend.port_variable] = str(port)
        env[backend.address_variable] = config.address(port)
    return env


def build_env(
    config: StackConfig, spec: ServiceSpec, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A process's environment. Precedence, lowest first: the caller's environment
    (OTEL_* included; TURNPIKE_* only if ``inherit_turnpike_env``), the stack's wiring,
    ``config.extra_env``, then the process's identity."""
    environ = os.environ if environ is None else environ
    env = {
        key: value
        for key, value in environ.items()
        if config.inherit_turnpike_env or not key.startswith("TURNPIKE_")
    }
    env.update(stack_env(config))
    env.update(config.extra_env)
    # One trace service per program; replicas (worker-1, worker-2) told apart by instance.
    env["OTEL_SERVICE_NAME"] = spec.module.rpartition(".")[2]
    attributes = [env.get("OTEL_RESOURCE_ATTRIBUTES", ""), f"service.instance.id={spec.name}"]
    env["OTEL_RESOURCE_ATTRIBUTES"] = ",".join(a for a in attributes if a)
    env.update(spec.env)
    return env


def keys_by_tenant(spec: str) -> dict[str, str]:
    """tenant -> the first of its keys, tenants in the order the setting names them."""
    keys: dict[str, str] = {}
    for key, tenant in parse_api_keys(spec):
        keys.setdefault(tenant, key)
    return keys


@dataclass(frozen=True)
class StackEndpoints:
    """Where a running stack can be reached."""

    base_url: str  # http://host:port/v1 (the SDK's base_url)
    ws_url: str  # ws://host:port/v1/responses (the WebSocket endpoint itself)
    ws_base_url: str  # ws://host:port/v1 (the SDK's websocket_base_url)
    # The first configured key (sk-turnpike-dev unless overridden; "" with a tenants file).
    api_key: str
    api_keys: dict[str, str]  # tenant -> key
    gateway: str
    safety: str
    tokenizer: str
    router: str
    billing: str
    imageres: str
    workers: dict[str, str]  # worker id -> address
    metrics: dict[str, str]  # process name (gateway, safety, worker-1...) -> host:port of /metrics
    state_dir: Path
    log_dir: Path
    ledger_path: Path
    # Gateway size limits when the stack sets them (None: the gateway's own default).
    max_body_bytes: int | None = None
    max_frame_bytes: int | None = None


def stack_endpoints(cfg: StackConfig) -> StackEndpoints:
    """Where a stack laid out as ``cfg`` answers, and the keys its gateway accepts."""
    gateway = ServiceSpec(GATEWAY.name, program(GATEWAY), cfg.gateway_port, GATEWAY.protocol)
    gateway_env = build_env(cfg, gateway)
    # As the gateway reads it: unset means the development key; set means checked. With
    # a tenants file the keys are not known here (the file holds their hashes only).
    if gateway_env.get(TENANTS_FILE_VARIABLE):
        keys = {}
    else:
        keys = keys_by_tenant(gateway_env.get(API_KEYS_VARIABLE, DEFAULT_API_KEYS))

    def limit(name: str) -> int | None:
        raw = gateway_env.get(name)
        return int(raw) if raw else None

    ws_base = f"ws://{cfg.host}:{cfg.gateway_port}/v1"
    return StackEndpoints(
        base_url=cfg.base_url,
        ws_url=f"{ws_base}/responses",
        ws_base_url=ws_base,
        api_key=next(iter(keys.values()), ""),
        api_keys=keys,
        gateway=cfg.address(cfg.gateway_port),
        workers=cfg.worker_addresses(),
        metrics=cfg.metrics_addresses(),
        state_dir=cfg.state_dir,
        log_dir=cfg.log_dir,
        ledger_path=cfg.ledger_path,
        max_body_bytes=limit("TURNPIKE_MAX_BODY_BYTES"),
        max_frame_bytes=limit("TURNPIKE_MAX_FRAME_BYTES"),
        **{svc: cfg.address(port) for svc, port in cfg.backend_ports().items()},
    )
