"""The ledger class on its own: idempotency, totals, isolation, durability."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from turnpike.billing.ledger import Ledger, ModelUsage, UsageEvent


def event(event_id: str, tenant: str = "acme", model: str = "m1", **usage: int) -> UsageEvent:
    fields = {"input_tokens": 100, "cached_tokens": 40, "output_tokens": 10, "created_at": 1}
    fields.update(usage)
    return UsageEvent(event_id=event_id, tenant=tenant, model=model, **fields)


@pytest.fixture
def ledger(tmp_path: Path):
    led = Ledger.open(tmp_path / "ledger.sqlite3")
    yield led
    led.close()


def test_creates_parent_folders_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "ledger.sqlite3"
    led = Ledger.open(path)
    led.record(event("resp_1"))
    assert path.exists()
    wal = path.with_name(path.name + "-wal")
    with closing(sqlite3.connect(path)) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert wal.stat().st_size > 0
        # With another connection open SQLite does not checkpoint on close by itself:
        # an empty WAL afterwards means close() folded it into the main file.
        led.close()
        assert wal.stat().st_size == 0
        assert other.execute("SELECT event_id FROM usage_events").fetchall() == [("resp_1",)]


def test_replayed_event_is_billed_once(ledger: Ledger) -> None:
    assert ledger.record(event("resp_1")) is False
    assert ledger.record(event("resp_1")) is True
    assert ledger.record(event("resp_1")) is True
    totals = ledger.usage("acme")
    assert (totals.responses, totals.input_tokens, totals.cached_tokens, totals.output_tokens) == (
        1,
        100,
        40,
        10,
    )


def test_replay_with_different_usage_keeps_first_record(ledger: Ledger) -> None:
    ledger.record(event("resp_1", input_tokens=5))
    assert ledger.record(event("resp_1", input_tokens=500)) is True
    assert ledger.usage("acme").input_tokens == 5


def test_totals_per_tenant_and_model(ledger: Ledger) -> None:
    ledger.record(event("r1", model="m1", input_tokens=10, cached_tokens=2, output_tokens=3))
    ledger.record(event("r2", model="m1", input_tokens=20, cached_tokens=0, output_tokens=7))
    ledger.record(event("r3", model="m2", input_tokens=1, cached_tokens=1, output_tokens=1))
    totals = ledger.usage("acme")
    assert totals.tenant == "acme"
    assert (totals.responses, totals.input_tokens, totals.cached_tokens, totals.output_tokens) == (
        3,
        31,
        3,
        11,
    )
    assert totals.by_model == [
        ModelUsage(model="m1", responses=2, input_tokens=30, cached_tokens=2, output_tokens=10),
        ModelUsage(model="m2", responses=1, input_tokens=1, cached_tokens=1, output_tokens=1),
    ]


def test_tenants_are_isolated(ledger: Ledger) -> None:
    ledger.record(event("r1", tenant="acme", model="m1", input_tokens=10))
    ledger.record(event("r2", tenant="globex", model="m2", input_tokens=99))
    acme = ledger.usage("acme")
    assert acme.responses == 1
    assert acme.input_tokens == 10
    assert [m.model for m in acme.by_model] == ["m1"]
    globex = ledger.usage("globex")
    assert globex.input_tokens == 99
    assert [m.model for m in globex.by_model] == ["m2"]


def test_unknown_tenant_gets_zeros(ledger: Ledger) -> None:
    ledger.record(event("r1"))
    totals = ledger.usage("nobody")
    assert totals.tenant == "nobody"
    assert (totals.responses, totals.input_tokens, totals.cached_tokens, totals.output_tokens) == (
        0,
        0,
        0,
        0,
    )
    assert totals.by_model == []


def test_same_event_id_across_tenants_is_one_event(ledger: Ledger) -> None:
    # The event id is the response id: globally unique, so it is the whole key.
    assert ledger.record(event("r1", tenant="acme")) is False
    assert ledger.record(event("r1", tenant="globex")) is True
    assert ledger.usage("globex").responses == 0


def test_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite3"
    led = Ledger.open(path)
    led.record(event("r1", model="m1", input_tokens=10, cached_tokens=1, output_tokens=2))
    led.record(event("r2", model="m2", input_tokens=20, cached_tokens=2, output_tokens=4))
    before = led.usage("acme")
    led.close()

    reopened = Ledger.open(path)
    try:
        assert reopened.usage("acme") == before
        assert reopened.record(event("r1")) is True  # still known after the restart
        assert reopened.usage("acme").responses == 2
    finally:
        reopened.close()


def test_close_is_idempotent(tmp_path: Path) -> None:
    led = Ledger.open(tmp_path / "ledger.sqlite3")
    led.close()
    led.close()


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (event("", tenant="acme"), "event_id"),
        (event("r1", tenant=""), "tenant"),
        (event("r1", model=""), "model"),
        (event("r1", input_tokens=-1), "input_tokens"),
        (event("r1", cached_tokens=-1), "cached_tokens"),
        (event("r1", output_tokens=-1), "output_tokens"),
    ],
)
def test_invalid_events_are_rejected(ledger: Ledger, bad: UsageEvent, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ledger.record(bad)
    assert ledger.usage("acme").responses == 0


def test_empty_tenant_query_is_rejected(ledger: Ledger) -> None:
    with pytest.raises(ValueError, match="tenant"):
        ledger.usage("")


def test_every_commit_is_fsynced(ledger: Ledger) -> None:
    # WAL with synchronous=FULL: each commit syncs the WAL before it returns.
    assert ledger._db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert ledger._db.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL


def test_many_events_in_one_transaction_are_billed_once_each(ledger: Ledger) -> None:
    ledger.record(event("r1"))
    duplicates = ledger.record_many([event("r1"), event("r2"), event("r3"), event("r2")])
    assert duplicates == [True, False, False, True]  # known before, new, new, earlier in it
    assert ledger.record_many([]) == []
    totals = ledger.usage("acme")
    assert (totals.responses, totals.input_tokens) == (3, 300)


def test_many_events_are_all_or_nothing(ledger: Ledger) -> None:
    with pytest.raises(ValueError, match="tenant"):
        ledger.record_many([event("r1"), event("r2", tenant="")])
    # A write that fails half-way rolls back what the transaction had written.
    ledger._db.execute(
        "CREATE TRIGGER refuse BEFORE INSERT ON usage_events WHEN NEW.event_id = 'boom'"
        " BEGIN SELECT RAISE(ABORT, 'refused'); END"
    )
    with pytest.raises(sqlite3.IntegrityError, match="refused"):
        ledger.record_many([event("r1"), event("boom"), event("r3")])
    assert ledger.usage("acme").responses == 0
    assert ledger.record_many([event("r1"), event("r3")]) == [False, False]
    assert ledger.usage("acme").responses == 2
