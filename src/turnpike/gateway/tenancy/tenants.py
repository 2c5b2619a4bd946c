"""Tenants, their API keys and their limits.

Two sources, one at a time: ``TURNPIKE_API_KEYS`` ("key:tenant,...", every tenant
unlimited), or the tenants file named by ``TURNPIKE_TENANTS_FILE``: YAML, checked against
``tenants.schema.json`` beside this module, holding per tenant the sha256 hashes of its keys
(never the keys) and its limits::

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
malformed hash, YAML that does not parse) is a ConfigError naming the file and the line:
the gateway does not start, and a reload (SIGHUP) keeps the tenants it had.

A presented key is hashed and the hash looked up: what is compared is the hash, so the
time a lookup takes tells nothing about the key.

``python -m turnpike.gateway.tenancy.tenants mint TENANT`` prints a new key and its line for the file;
``python -m turnpike.gateway.tenancy.tenants check FILE`` checks a file as the gateway reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import secrets
import signal
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from turnpike.config import (
    TENANTS_FILE_VARIABLE,
    ConfigError,
    GatewaySettings,
    exit_on_config_error,
    parse_api_keys,
)
from turnpike.gateway.tenancy.auth import bearer_token, unknown_key

log = logging.getLogger(__name__)

SCHEMA_PATH = Path(__file__).with_name("tenants.schema.json")
KEY_PREFIX = "sk-turnpike-"
HASH_PREFIX = "sha256:"
PERIODS = ("hour", "day", "week", "month")
_FIXED_PERIODS = {"hour": timedelta(hours=1), "day": timedelta(days=1), "week": timedelta(weeks=1)}


# -- what the rest of the gateway reads ----------------------------------------------------


@dataclass(frozen=True)
class TokenBudget:
    """Input plus output tokens a tenant may use per calendar period (UTC; a week starts
    on Monday, a month on its first day)."""

    tokens: int
    period: str  # hour | day | week | month

    def __post_init__(self) -> None:
        if self.period not in PERIODS:
            raise ValueError(f"period {self.period!r} is not one of {', '.join(PERIODS)}")

    def period_start(self, now: float) -> float:
        """The unix time the period holding ``now`` began."""
        moment = datetime.fromtimestamp(now, UTC)
        hour = moment.replace(minute=0, second=0, microsecond=0)
        day = hour.replace(hour=0)
        start = {
            "hour": hour,
            "day": day,
            "week": day - timedelta(days=day.weekday()),
            "month": day.replace(day=1),
        }[self.period]
        return start.timestamp()

    def period_end(self, now: float) -> float:
        """The unix time the period holding ``now`` ends (the next one's start)."""
        start = datetime.fromtimestamp(self.period_start(now), UTC)
        if self.period == "month":
            end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
        else:
            end = start + _FIXED_PERIODS[self.period]
        return end.timestamp()


@dataclass(frozen=True)
class TenantLimits:
    """A tenant's limits; None is no limit."""

    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None  # input plus output
    max_concurrent_responses: int | None = None
    max_websocket_connections: int | None = None
    token_budget: TokenBudget | None = None
    models: frozenset[str] | None = None  # None: every model

    def allows_model(self, model: str) -> bool:
        return self.models is None or model in self.models


UNLIMITED = TenantLimits()
# What limits() gives a name that is no tenant, such as one a reload removed while its
# WebSocket connections are still open: nothing allowed.
NO_ACCESS = TenantLimits(0, 0, 0, 0, None, frozenset())


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


class TenantDirectory:
    """Who is calling, and what they may do."""

    def __init__(self, table: TenantTable, source: str | None = None) -> None:
        """``source``: the tenants file the table was read from (None: read once, from
        ``TURNPIKE_API_KEYS``)."""
        self._table = table
        self.source = source

    @classmethod
    def from_settings(cls, settings: GatewaySettings) -> TenantDirectory:
        """The tenants file when one is set, else ``TURNPIKE_API_KEYS`` with every tenant
        unlimited. ConfigError for a file that cannot be read or is not valid."""
        if settings.tenants_file:
            return cls.from_file(settings.tenants_file)
        return cls.from_api_keys(settings.api_keys)

    @classmethod
    def from_api_keys(cls, spec: str) -> TenantDirectory:
        pairs = parse_api_keys(spec)
        limits = {tenant: UNLIMITED for _, tenant in pairs}
        return cls(TenantTable(limits, {hash_key(key): tenant for key, tenant in pairs}))

    @classmethod
    def from_file(cls, path: str) -> TenantDirectory:
        return cls(load_file(path), source=path)

    def tenant_for(self, headers: Mapping[str, str]) -> str:
        """The caller's tenant, or an ApiError(401)."""
        token = bearer_token(headers)
        tenant = self._table.tenant_of_hash.get(hash_key(token))
        if tenant is None:
            raise unknown_key(token)
        return tenant

    def limits(self, tenant: str) -> TenantLimits:
        """The tenant's limits; NO_ACCESS for a name that is no tenant (any more)."""
        return self._table.limits.get(tenant, NO_ACCESS)

    def tenants(self) -> list[str]:
        return list(self._table.limits)

    def reload(self) -> None:
        """Reads the tenants file again and serves from it. A file that is not valid is
        logged and changes nothing; this never raises (it runs from a signal handler)."""
        if self.source is None:
            log.info("tenants: the keys come from TURNPIKE_API_KEYS, read at start: no reload")
            return
        try:
            table = load_file(self.source)
        except ConfigError as exc:
            log.error("tenants file not reloaded, the previous tenants stay in force: %s", exc)
            return
        except Exception:
            log.exception("tenants file not reloaded, the previous tenants stay in force")
            return
        previous, self._table = self._table, table
        log.info("tenants file %s reloaded: %s", self.source, describe_changes(previous, table))


def describe_changes(old: TenantTable, new: TenantTable) -> str:
    """What a reload changed, by tenant name (never a key or a hash)."""
    added = [t for t in new.limits if t not in old.limits]
    removed = [t for t in old.limits if t not in new.limits]
    kept = [t for t in new.limits if t in old.limits]
    old_keys, new_keys = old.hashes_by_tenant(), new.hashes_by_tenant()
    parts = [f"{len(new.limits)} tenants"]
    for what, names in (
        ("added", added),
        ("removed", removed),
        ("new limits", [t for t in kept if old.limits[t] != new.limits[t]]),
        ("new keys", [t for t in kept if old_keys[t] != new_keys[t]]),
    ):
        if names:
            parts.append(f"{what}: {', '.join(names)}")
    if len(parts) == 1:
        parts.append("no change")
    return "; ".join(parts)


@contextmanager
def reload_on_sighup(directory: TenantDirectory) -> Iterator[None]:
    """While open (the app's lifespan), SIGHUP reloads ``directory`` in the running event
    loop. Where there is no SIGHUP, or the loop is not in the main thread (an app run by a
    test client), nothing is installed."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGHUP, directory.reload)
        installed = True
    except (AttributeError, NotImplementedError, RuntimeError, ValueError):
        installed = False
    try:
        yield
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGHUP)


# -- reading the file --------------------------------------------------------------------


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


# -- the command -------------------------------------------------------------------------


def mint_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def check_tenant_name(name: str) -> None:
    problem = jsonschema.exceptions.best_match(
        _validator().evolve(schema=_schema()["$defs"]["tenant_name"]).iter_errors(name)
    )
    if problem is not None:
        raise ConfigError(f"tenant name {name!r}: {problem.message}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m turnpike.gateway.tenancy.tenants", description="The gateway's tenants file."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    mint = commands.add_parser(
        "mint", help="print a new API key (once) and its line for the tenants file"
    )
    mint.add_argument("tenant")
    check = commands.add_parser(
        "check", help="check a tenants file as the gateway reads it (exit 2 if it is not valid)"
    )
    check.add_argument("file")
    args = parser.parse_args(argv)
    if args.command == "mint":
        check_tenant_name(args.tenant)
        key = mint_key()
        print(
            f"A new key for tenant {args.tenant!r}, shown this once (it is stored nowhere), "
            f"then its line for tenants.{args.tenant}.keys in the tenants file (reload the "
            "gateway with SIGHUP after editing):",
            file=sys.stderr,
        )
        print(key)
        print(f'- "{hash_key(key)}"')
    else:
        table = load_file(args.file)
        print(f"{args.file}: valid: {len(table.limits)} tenants, {len(table.tenant_of_hash)} keys")


if __name__ == "__main__":
    with exit_on_config_error("gateway"):
        main()
