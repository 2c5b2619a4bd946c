"""The usage ledger: a SQLite table keyed by event id, so redelivered events are billed once.

Plain synchronous code with no threading of its own: the service owns one ``Ledger`` on one
dedicated thread (a SQLite connection must be used from the thread that opened it).

Durability choice: WAL journal with ``synchronous=FULL``. In WAL mode ``NORMAL`` already
survives a crash of the process (a committed transaction is in the WAL file, which the OS
keeps), but it can lose the last commits on power loss or an OS crash because the WAL is
only fsynced at checkpoints. A ledger acknowledges an event to say "this is billed"; losing
acknowledged events silently under-bills, so each commit is fsynced (``FULL``).
``record_many`` writes several events in one transaction: one commit, one fsync for all of
them (the service's group commit, ``turnpike.billing.group_commit``, hands it every event that
arrived while the previous commit was in flight).
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS usage_events (
    event_id      TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL,
    model         TEXT NOT NULL,
    input_tokens  INTEGER NOT NULL,
    cached_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    created_at    INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS usage_events_by_tenant ON usage_events (tenant, model);
"""


@dataclass(frozen=True)
class UsageEvent:
    event_id: str
    tenant: str
    model: str
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    created_at: int = 0

    def validate(self) -> None:
        """Raise ``ValueError`` with a client-facing message when the event is malformed."""
        for name in ("event_id", "tenant", "model"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")
        for name in ("input_tokens", "cached_tokens", "output_tokens", "created_at"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative")


@dataclass(frozen=True)
class ModelUsage:
    model: str
    responses: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class UsageTotals:
    tenant: str
    responses: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    by_model: list[ModelUsage] = field(default_factory=list)


class Ledger:
    def __init__(self, connection: sqlite3.Connection) -> None:
        self._db = connection
        self._closed = False

    @classmethod
    def open(cls, path: str | Path) -> Ledger:
        """Open (creating if needed) the ledger file and its parent folders."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # Autocommit mode: transactions are only the explicit ones of ``record_many``, each
        # committed (and fsynced) before it returns, which is when the service acknowledges.
        db = sqlite3.connect(path, isolation_level=None)
        try:
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise sqlite3.OperationalError(f"could not enable WAL mode (got {mode!r})")
            db.execute("PRAGMA synchronous=FULL")
            # Another process holding the file (a previous instance still stopping) should
            # delay us briefly rather than fail the first write.
            db.execute("PRAGMA busy_timeout=5000")
            db.executescript(_SCHEMA)
        except BaseException:
            db.close()
            raise
        return cls(db)

    def record(self, event: UsageEvent) -> bool:
        """Store the event; return True if it was already in the ledger (nothing changes)."""
        return self.record_many([event])[0]

    def record_many(self, events: Sequence[UsageEvent]) -> list[bool]:
        """Store the events in one transaction, durable (fsynced) when this returns; for
        each, whether it was already in the ledger, or earlier in ``events``. All or
        nothing: an invalid event or a failed write stores none of them."""
        for event in events:
            event.validate()
        # IMMEDIATE takes the write lock up front (busy_timeout waits for it), so a
        # transaction never fails half-way on a lock another connection holds.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            duplicates = [self._insert(event) for event in events]
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # a failed COMMIT may have rolled back already
                self._db.execute("ROLLBACK")
            raise
        return duplicates

    def _insert(self, event: UsageEvent) -> bool:
        cursor = self._db.execute(
            "INSERT INTO usage_events (event_id, tenant, model, input_tokens, cached_tokens,"
            " output_tokens, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
            " ON CONFLICT (event_id) DO NOTHING",
            (
                event.event_id,
                event.tenant,
                event.model,
                event.input_tokens,
                event.cached_tokens,
                event.output_tokens,
                event.created_at,
            ),
        )
        duplicate = cursor.rowcount == 0
        if duplicate:
            self._warn_if_different(event)
        return duplicate

    def _warn_if_different(self, event: UsageEvent) -> None:
        # A replay must carry the same usage; a different one under the same id is a
        # producer bug worth seeing in the logs (the first record still wins).
        row = self._db.execute(
            "SELECT tenant, model, input_tokens, cached_tokens, output_tokens"
            " FROM usage_events WHERE event_id = ?",
            (event.event_id,),
        ).fetchone()
        incoming = (
            event.tenant,
            event.model,
            event.input_tokens,
            event.cached_tokens,
            event.output_tokens,
        )
        if row is not None and tuple(row) != incoming:
            log.warning(
                "event %s replayed with different usage; keeping the first record",
                event.event_id,
            )

    def usage(self, tenant: str) -> UsageTotals:
        """Totals for one tenant, with a per-model breakdown sorted by model. Unknown
        tenants get zeros."""
        if not tenant:
            raise ValueError("tenant must not be empty")
        rows = self._db.execute(
            "SELECT model, COUNT(*), SUM(input_tokens), SUM(cached_tokens), SUM(output_tokens)"
            " FROM usage_events WHERE tenant = ? GROUP BY model ORDER BY model",
            (tenant,),
        ).fetchall()
        by_model = [ModelUsage(*row) for row in rows]
        return UsageTotals(
            tenant=tenant,
            responses=sum(m.responses for m in by_model),
            input_tokens=sum(m.input_tokens for m in by_model),
            cached_tokens=sum(m.cached_tokens for m in by_model),
            output_tokens=sum(m.output_tokens for m in by_model),
            by_model=by_model,
        )

    def close(self) -> None:
        """Fold the WAL back into the database file and close, leaving one clean file."""
        if self._closed:
            return
        self._closed = True
        try:
            self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            self._db.close()
