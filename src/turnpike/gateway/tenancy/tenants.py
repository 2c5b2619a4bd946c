"""Tenants, their API keys and their limits: who is calling, and what they may do.

Two sources, one at a time: ``TURNPIKE_API_KEYS`` ("key:tenant,...", every tenant
unlimited), or the tenants file named by ``TURNPIKE_TENANTS_FILE``
(``turnpike.gateway.tenancy.tenants_file``: per tenant the hashes of its keys and its
limits). A file that is not valid stops the gateway at start; a reload (SIGHUP) of one
keeps the tenants it had.

A presented key is hashed and the hash looked up: what is compared is the hash, so the
time a lookup takes tells nothing about the key.

``python -m turnpike.gateway.tenancy.tenants mint TENANT`` prints a new key and its line for the file;
``python -m turnpike.gateway.tenancy.tenants check FILE`` checks a file as the gateway reads it.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import secrets
import signal
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from turnpike.config import ConfigError, GatewaySettings, exit_on_config_error, parse_api_keys
from turnpike.gateway.tenancy.auth import bearer_token, unknown_key
from turnpike.gateway.tenancy.tenant_limits import NO_ACCESS, UNLIMITED, TenantLimits
from turnpike.gateway.tenancy.tenants_file import (
    TenantTable,
    check_tenant_name,
    hash_key,
    load_file,
)

log = logging.getLogger(__name__)

KEY_PREFIX = "sk-turnpike-"


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


# -- the command -------------------------------------------------------------------------


def mint_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


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
