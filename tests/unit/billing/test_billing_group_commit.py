"""Group commit: concurrent writes share a commit, and nobody is answered before theirs."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from turnpike.billing.group_commit import GroupCommit
from turnpike.billing.ledger import UsageEvent
from turnpike.billing.server import LedgerThread


class Disk:
    """A test double for the transaction and its fsync: ``write`` makes its items durable
    when it returns, and can be held in flight (``hold``) while more submissions arrive."""

    def __init__(self) -> None:
        self.durable: set[int] = set()
        self.commits: list[list[int]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.in_flight = asyncio.Event()
        self.fail_next = False

    def hold(self) -> None:
        self.gate.clear()
        self.in_flight.clear()

    async def write(self, items: list[int]) -> list[int]:
        self.in_flight.set()
        await self.gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise OSError("disk full")
        self.commits.append(items)
        self.durable.update(items)
        return [item * 10 for item in items]


async def test_writes_waiting_behind_a_commit_share_the_next_and_are_acked_only_after_it():
    disk = Disk()
    commits = GroupCommit(disk.write)
    acked: list[int] = []

    async def submit(item: int) -> None:
        assert await commits.submit([item]) == [item * 10]
        assert item in disk.durable, f"{item} acknowledged before its commit"
        acked.append(item)

    disk.hold()
    first = asyncio.create_task(submit(0))
    await disk.in_flight.wait()  # an idle committer writes the first item at once, alone
    rest = [asyncio.create_task(submit(i)) for i in range(1, 101)]
    await asyncio.sleep(0.01)
    assert acked == []  # nothing is answered while its commit is in flight
    disk.gate.set()
    await asyncio.gather(first, *rest)
    assert disk.commits == [[0], list(range(1, 101))]
    assert sorted(acked) == list(range(101))
    await commits.close()


@dataclass
class Held:
    disk: Disk
    commits: GroupCommit[int, int]
    first: asyncio.Task[list[int]]  # submitted [1]; its commit is in flight until released


@pytest.fixture
async def held() -> Held:
    disk = Disk()
    commits = GroupCommit(disk.write)
    disk.hold()
    first = asyncio.create_task(commits.submit([1]))
    await disk.in_flight.wait()
    return Held(disk, commits, first)


async def test_a_submission_is_written_whole_in_one_commit_with_its_own_results(held: Held):
    pair = asyncio.create_task(held.commits.submit([2, 3]))
    trio = asyncio.create_task(held.commits.submit([4, 5, 6]))
    await asyncio.sleep(0)
    held.disk.gate.set()
    assert await asyncio.gather(held.first, pair, trio) == [[10], [20, 30], [40, 50, 60]]
    assert held.disk.commits == [[1], [2, 3, 4, 5, 6]]


async def test_a_failed_commit_fails_every_write_in_it_and_the_next_group_goes_on(held: Held):
    held.disk.fail_next = True  # the commit in flight fails
    second = asyncio.create_task(held.commits.submit([2]))
    await asyncio.sleep(0)
    held.disk.gate.set()
    with pytest.raises(OSError, match="disk full"):
        await held.first
    assert await second == [20]
    assert await held.commits.submit([3]) == [30]
    assert held.disk.commits == [[2], [3]] and held.disk.durable == {2, 3}


async def test_a_cancelled_caller_leaves_the_others_answered(held: Held):
    stays = asyncio.create_task(held.commits.submit([2]))
    await asyncio.sleep(0)
    held.first.cancel()
    held.disk.gate.set()
    assert await stays == [20]
    assert held.disk.durable == {1, 2}  # its write was already in flight: it still committed


async def test_close_waits_for_accepted_writes_then_refuses_new_ones():
    disk = Disk()
    commits = GroupCommit(disk.write)
    disk.hold()
    pending = [asyncio.create_task(commits.submit([i])) for i in range(3)]
    await disk.in_flight.wait()
    closing_ = asyncio.create_task(commits.close())
    await asyncio.sleep(0)
    assert not closing_.done()
    disk.gate.set()
    await closing_
    assert [await p for p in pending] == [[0], [10], [20]]
    with pytest.raises(RuntimeError, match="closed"):
        await commits.submit([9])


# -- the ledger's thread, on a real SQLite file -----------------------------------------


def event(n: int) -> UsageEvent:
    return UsageEvent(
        event_id=f"resp_{n}", tenant="acme", model=f"m{n % 2}", input_tokens=n, output_tokens=1
    )


async def test_concurrent_records_on_the_ledger_are_group_committed_durable_and_billed_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ledger.sqlite3"
    ledger = LedgerThread(path)
    commits: list[list[str]] = []
    committed: set[str] = set()
    record_many = ledger._ledger.record_many

    def counting_record_many(events):  # on the ledger's thread
        result = record_many(events)  # returns once committed and fsynced
        commits.append([e.event_id for e in events])
        committed.update(e.event_id for e in events)
        return result

    monkeypatch.setattr(ledger._ledger, "record_many", counting_record_many)
    try:
        with closing(sqlite3.connect(path)) as reader:

            async def record(n: int) -> bool:
                duplicate = await ledger.record(event(n))
                assert f"resp_{n}" in committed, f"resp_{n} acknowledged before its commit"
                # Another connection sees it: it is in the file, not just in a transaction.
                found = reader.execute(
                    "SELECT COUNT(*) FROM usage_events WHERE event_id = ?", (f"resp_{n}",)
                ).fetchone()
                assert found == (1,)
                return duplicate

            # 200 events, each delivered three times at once: duplicates inside a group ...
            ids = list(range(200)) * 3
            first = await asyncio.gather(*(record(n) for n in ids))
            # ... and across groups (and a batch of them, all replays).
            again = await asyncio.gather(*(record(n) for n in range(0, 200, 7)))
            replayed = await ledger.record_many([event(n) for n in range(150, 250)])
    finally:
        await ledger.close()
    assert sum(not d for d in first) == 200
    assert all(again)
    assert replayed == [True] * 50 + [False] * 50
    assert len(commits) < len(ids) / 10  # grouped, not one commit each
    totals_ledger = LedgerThread(path)
    try:
        totals = await totals_ledger.usage("acme")
    finally:
        await totals_ledger.close()
    assert totals.responses == 250
    assert totals.input_tokens == sum(range(250))
    assert [(m.model, m.responses) for m in totals.by_model] == [("m0", 125), ("m1", 125)]
