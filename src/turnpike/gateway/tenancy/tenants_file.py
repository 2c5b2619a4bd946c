"""The tenants file: YAML, checked against ``tenants.schema.json`` beside this module,
holding per tenant the sha256 hashes of its keys (never the keys) and its limits::

    tenants:
      acme:
        keys: ["sha256:<64 hex digits>"]
        requests_per_minute: 600
        tokens_per_minute: 200000          # input plus output
        max_concurrent_responses: 32
        max_websocket_connections: 8
        token_budget: {tokens: 10000000, period: day}   # hour | day | week | month (UTC)
        models: [turnpike-sim, turnpike-sim-4000]       # left out: every model

A limit left out is no limit. A file that is not exactly that (an unknown field, a key
repeated in a mapping, a hash under two tenants, a negative limit, a wrong type, a
malformed hash, YAML that does not parse) is a ConfigError naming the file and the line,
never quoting what may be a key. ``turnpike.gateway.tenancy.tenants`` serves what it
reads, and its command checks a file as the gateway reads it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from turnpike.config import TENANTS_FILE_VARIABLE, ConfigError
from turnpike.gateway.tenancy.tenant_limits import TenantLimits, TokenBudget

SCHEMA_PATH = Path(__file__).with_name("tenants.schema.json")
HASH_PREFIX = "sha256:"


@dataclass(frozen=True)
class TenantTable:
    """One reading of the configuration: tenants in the order it names them, and the
    tenant of each key hash."""

    limits: Mapping[str, TenantLimits]
    tenant_of_hash: Mapping[str, str]  # "sha256:<hex>" -> tenant

    def hashes_by_tenant(self) -> dict[str, set[str]]:
        found: dict[str, set[str]] = {tenant: set() for tenant in self.limits}
        for key_hash, tenant in self.tenant_of_hash.items():
            found[tenant].add(key_hash)
        return found


def hash_key(key: str) -> str:
    """How the tenants file holds ``key``: "sha256:" and the hex digest of its UTF-8."""
    return HASH_PREFIX + hashlib.sha256(key.encode()).hexdigest()


class _Problem(Exception):
    """What is wrong with the file, and on which line (1-based)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def load_file(path: str) -> TenantTable:
    """The tenants file read and checked; ConfigError naming the file and the line."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"{TENANTS_FILE_VARIABLE}={path}: cannot read it: {exc.strerror or exc}"
        ) from None
    try:
        return _table_of(_parse(raw))
    except _Problem as problem:
        raise ConfigError(
            f"{TENANTS_FILE_VARIABLE}={path} line {problem.line}: {problem.message}"
        ) from None


Place = tuple[Any, ...]  # a place in the document: mapping keys and sequence indexes


@dataclass(frozen=True)
class _Document:
    data: Any
    lines: dict[Place, int]  # where each place starts (a mapping entry: its key's line)

    def line_of(self, path: Place) -> int:
        """The line of ``path``, or of its nearest ancestor the file shows."""
        for end in range(len(path), -1, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return 1


def _parse(raw: bytes) -> _Document:
    """The YAML as data, with the line of every place in it. Repeated mapping keys are a
    problem here: loading would silently keep the last."""
    try:
        text = raw.decode()
    except UnicodeDecodeError as exc:
        raise _Problem(raw[: exc.start].count(b"\n") + 1, "not UTF-8 text") from None
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise _Problem(1, "the file is empty: it must hold a 'tenants:' mapping")
        lines = _lines_of(loader, root)
        return _Document(loader.construct_document(root), lines)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        # Only the problem: the error's own text quotes the file, which may hold a key.
        raise _Problem(line, f"not valid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise _Problem(1, f"not valid YAML: {type(exc).__name__}") from None
    finally:
        loader.dispose()


MERGE_TAG = "tag:yaml.org,2002:merge"


def _lines_of(loader: yaml.SafeLoader, root: yaml.Node) -> dict[Place, int]:
    lines: dict[Place, int] = {(): root.start_mark.line + 1}
    seen: set[int] = set()  # an alias is the node it names: walk it once

    def walk(node: yaml.Node, path: Place) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first_line: dict[Any, int] = {}
            for key_node, value_node in node.value:
                line = key_node.start_mark.line + 1
                if key_node.tag == MERGE_TAG:
                    continue  # merged keys may repeat: YAML says which one wins
                if not isinstance(key_node, yaml.ScalarNode):
                    raise _Problem(line, f"{_dotted(path)}: a key must be a plain value")
                key = loader.construct_object(key_node)
                if key in first_line:
                    raise _Problem(
                        line,
                        f"{_dotted(path)}: duplicate key {key!r} (first on line {first_line[key]})",
                    )
                first_line[key] = lines[(*path, key)] = line
                walk(value_node, (*path, key))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                lines[(*path, index)] = item.start_mark.line + 1
                walk(item, (*path, index))

    walk(root, ())
    return lines


def _dotted(path: Place) -> str:
    """tenants.acme.keys[0]"""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text or "the file"


def _strict_integer(checker: Any, instance: Any) -> bool:
    # JSON Schema counts 600.0 as an integer, and Python counts True: neither is a limit.
    return isinstance(instance, int) and not isinstance(instance, bool)


@cache
def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


@cache
def _validator() -> jsonschema.protocols.Validator:
    base = jsonschema.Draft202012Validator
    strict = jsonschema.validators.extend(
        base, type_checker=base.TYPE_CHECKER.redefine("integer", _strict_integer)
    )
    return strict(_schema())


def _explain(error: jsonschema.ValidationError) -> tuple[Place, str]:
    """Where a schema error is, and what to say, never quoting what may be a key."""
    path = tuple(error.absolute_path)
    if "propertyNames" in error.absolute_schema_path:
        name = error.instance
        if error.validator == "type":
            return (*path, name), f"{_dotted(path)}: tenant name {name!r} must be a string"
        return (*path, name), f"{_dotted(path)}: tenant name {name!r}: {error.message}"
    if error.validator == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        name = next(key for key in error.instance if key not in allowed)
        return (*path, name), (
            f"{_dotted(path)}: unknown field {name!r} (allowed: {', '.join(allowed)})"
        )
    if error.validator == "minProperties" and path == ("tenants",):
        return path, "tenants: no tenant; name at least one"
    if len(path) >= 3 and path[0] == "tenants" and path[2] == "keys":
        if len(path) == 3:
            return path, f"{_dotted(path)}: must be a list of key hashes"
        return path, (
            f"{_dotted(path)}: not a key hash: expected 'sha256:' and 64 lowercase hex "
            "digits (the file holds hashes of keys, never keys: "
            "python -m turnpike.gateway.tenancy.tenants mint TENANT prints both)"
        )
    if error.validator == "type":
        # The value itself is not quoted: a key pasted in the wrong place would be.
        expected = _KINDS.get(error.validator_value, error.validator_value)
        return path, f"{_dotted(path)}: must be {expected}, not {_kind(error.instance)}"
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return path, f"{_dotted(path)}: {message}"


_KINDS = {"integer": "an integer", "string": "a string", "array": "a list", "object": "a mapping"}


def _kind(value: Any) -> str:
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return f"a {type(value).__name__}"


def _table_of(document: _Document) -> TenantTable:
    problems = []
    for error in _validator().iter_errors(document.data):
        path, message = _explain(error)
        problems.append((document.line_of(path), -len(path), message))
    if problems:
        line, _, message = min(problems)  # the first in the file
        raise _Problem(line, message)
    limits: dict[str, TenantLimits] = {}
    tenant_of_hash: dict[str, str] = {}
    first_place: dict[str, Place] = {}
    for tenant, entry in document.data["tenants"].items():
        for index, key_hash in enumerate(entry["keys"]):
            place = ("tenants", tenant, "keys", index)
            if key_hash in first_place:
                first = first_place[key_hash]
                raise _Problem(
                    document.line_of(place),
                    f"{_dotted(place)}: the same key hash as {_dotted(first)} (line "
                    f"{document.line_of(first)}): a key belongs to one tenant, once",
                )
            first_place[key_hash] = place
            tenant_of_hash[key_hash] = tenant
        budget = entry.get("token_budget")
        models = entry.get("models")
        limits[tenant] = TenantLimits(
            requests_per_minute=entry.get("requests_per_minute"),
            tokens_per_minute=entry.get("tokens_per_minute"),
            max_concurrent_responses=entry.get("max_concurrent_responses"),
            max_websocket_connections=entry.get("max_websocket_connections"),
            token_budget=TokenBudget(budget["tokens"], budget["period"]) if budget else None,
            models=frozenset(models) if models is not None else None,
        )
    return TenantTable(limits, tenant_of_hash)


def check_tenant_name(name: str) -> None:
    problem = jsonschema.exceptions.best_match(
        _validator().evolve(schema=_schema()["$defs"]["tenant_name"]).iter_errors(name)
    )
    if problem is not None:
        raise ConfigError(f"tenant name {name!r}: {problem.message}")
