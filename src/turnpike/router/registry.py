"""The model registry: every model the stack serves, from ONE configuration file.

The file (``models.json`` beside this module unless ``TURNPIKE_MODELS_FILE`` names
another) is ``{"models": [entry, ...]}``; each entry has:

- ``id`` (canonical name), ``aliases`` (other names that resolve to it),
- ``backend``: one of ``turnpike.backend_names.BACKEND_NAMES`` (``"simulator"``,
  ``"cerebras"``, ...), ``owned_by``,
- ``created``: a fixed unix timestamp, shown by ``/v1/models``,
- ``context_window`` and ``max_output_tokens`` (tokens),
- ``tokens_per_second`` (decode speed), ``ttft_ms`` (fixed time to first token) and
  ``prefill_tokens_per_second`` (prompt tokens not in the worker's prefix cache):
  the simulator's model time. Hosted entries carry them too, so they can be
  simulated while no hosted adapter serves them.
- optional ``requires_env``: the model is listed and resolvable only while that
  environment variable is set and non-empty (hosted models need their API key, a
  self-hosted server its base URL).

The shipped defaults: ``turnpike-sim`` (1000 tok/s, the fast model's target),
``turnpike-sim-65`` (the earlier flagship speed) and ``turnpike-sim-4000`` (the fast
model's bursts), all with a 50 ms fixed TTFT and 20,000 tok/s prefill;
``gpt-oss-120b`` on Cerebras, gated on ``CEREBRAS_API_KEY``; and ``self-hosted`` on
the OpenAI-compatible backend (a vLLM, SGLang or llama.cpp server), gated on
``TURNPIKE_OPENAI_COMPAT_BASE_URL``.

The file is validated in full at load, so a typo fails at start-up with a message
naming the entry and field, never at the first request.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnpike.backend_names import BACKEND_NAMES

DEFAULT_MODELS_FILE = Path(__file__).with_name("models.json")


class RegistryError(ValueError):
    """The models file is missing or invalid."""


class UnknownModelError(LookupError):
    def __init__(self, name: str) -> None:
        super().__init__(f"The model '{name}' does not exist or you do not have access to it.")
        self.name = name


@dataclass(frozen=True)
class ModelEntry:
    id: str
    aliases: tuple[str, ...]
    backend: str
    owned_by: str
    created: int
    context_window: int
    max_output_tokens: int
    tokens_per_second: float
    ttft_ms: float
    prefill_tokens_per_second: float
    requires_env: str | None = None


# field -> (accepted types, required)
_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "id": ((str,), True),
    "aliases": ((list,), False),
    "backend": ((str,), True),
    "owned_by": ((str,), True),
    "created": ((int,), True),
    "context_window": ((int,), True),
    "max_output_tokens": ((int,), True),
    "tokens_per_second": ((int, float), True),
    "ttft_ms": ((int, float), True),
    "prefill_tokens_per_second": ((int, float), True),
    "requires_env": ((str,), False),
}


def _parse_entry(raw: Any, where: str) -> ModelEntry:
    if not isinstance(raw, dict):
        raise RegistryError(f"{where}: must be an object")
    if isinstance(raw.get("id"), str) and raw["id"].strip():
        where = f"{where} ({raw['id']})"
    unknown = sorted(set(raw) - set(_FIELDS))
    if unknown:
        raise RegistryError(f"{where}: unknown field(s) {', '.join(unknown)}")
    for name, (types, required) in _FIELDS.items():
        if name not in raw:
            if required:
                raise RegistryError(f"{where}: missing field '{name}'")
            continue
        value = raw[name]
        # bool is an int subclass; a boolean is never a valid number here.
        if isinstance(value, bool) or not isinstance(value, types):
            kind = " or ".join(t.__name__ for t in types)
            raise RegistryError(f"{where}: field '{name}' must be {kind}, got {value!r}")
    if not raw["id"].strip():
        raise RegistryError(f"{where}: 'id' must not be empty")
    aliases = raw.get("aliases", [])
    if not all(isinstance(a, str) and a.strip() for a in aliases):
        raise RegistryError(f"{where}: 'aliases' must be a list of non-empty strings")
    if raw["backend"] not in BACKEND_NAMES:
        raise RegistryError(f"{where}: 'backend' must be one of {', '.join(BACKEND_NAMES)}")
    for name in (
        "context_window",
        "max_output_tokens",
        "tokens_per_second",
        "prefill_tokens_per_second",
    ):
        if raw[name] <= 0:
            raise RegistryError(f"{where}: '{name}' must be > 0")
    if raw["ttft_ms"] < 0 or raw["created"] < 0:
        raise RegistryError(f"{where}: 'ttft_ms' and 'created' must be >= 0")
    if raw["max_output_tokens"] > raw["context_window"]:
        raise RegistryError(f"{where}: 'max_output_tokens' exceeds 'context_window'")
    if "requires_env" in raw and not raw["requires_env"].strip():
        raise RegistryError(f"{where}: 'requires_env' must not be empty")
    return ModelEntry(
        id=raw["id"],
        aliases=tuple(aliases),
        backend=raw["backend"],
        owned_by=raw["owned_by"],
        created=raw["created"],
        context_window=raw["context_window"],
        max_output_tokens=raw["max_output_tokens"],
        tokens_per_second=float(raw["tokens_per_second"]),
        ttft_ms=float(raw["ttft_ms"]),
        prefill_tokens_per_second=float(raw["prefill_tokens_per_second"]),
        requires_env=raw.get("requires_env"),
    )


def parse_models(data: Any) -> list[ModelEntry]:
    """Validate the decoded JSON document; names must be unique across ids and aliases."""
    if not isinstance(data, dict) or set(data) != {"models"}:
        raise RegistryError('the models file must be an object {"models": [...]}')
    if not isinstance(data["models"], list) or not data["models"]:
        raise RegistryError("'models' must be a non-empty list")
    entries = [_parse_entry(raw, f"models[{i}]") for i, raw in enumerate(data["models"])]
    owner: dict[str, str] = {}
    for entry in entries:
        for name in (entry.id, *entry.aliases):
            if name in owner:
                raise RegistryError(
                    f"name '{name}' is used by both '{owner[name]}' and '{entry.id}'"
                )
            owner[name] = entry.id
    return entries


def load_models(path: str | os.PathLike[str] | None = None) -> list[ModelEntry]:
    """Read and validate the models file (the shipped default when ``path`` is empty)."""
    file = Path(path) if path else DEFAULT_MODELS_FILE
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise RegistryError(f"cannot read models file {file}: {exc.strerror}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RegistryError(f"models file {file} is not valid JSON: {exc}") from exc
    try:
        return parse_models(data)
    except RegistryError as exc:
        raise RegistryError(f"models file {file}: {exc}") from exc


class ModelRegistry:
    """Lookup over the configured models, hiding those whose required env var is unset.

    The environment is read once at construction: availability does not change while
    the process runs, like any other configuration.
    """

    def __init__(self, entries: list[ModelEntry], env: Mapping[str, str] | None = None) -> None:
        env = os.environ if env is None else env
        self._available = [
            e for e in entries if e.requires_env is None or env.get(e.requires_env, "").strip()
        ]
        self._by_name = {name: e for e in self._available for name in (e.id, *e.aliases)}

    def models(self) -> list[ModelEntry]:
        return list(self._available)

    def resolve(self, name: str) -> ModelEntry:
        entry = self._by_name.get(name)
        if entry is None:
            raise UnknownModelError(name)
        return entry
