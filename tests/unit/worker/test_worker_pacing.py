from __future__ import annotations

import time

import pytest

from turnpike.vocab import harmony_encoding
from turnpike.worker.pacing import Chunk, paced, token_chunks

ENCODING = harmony_encoding()


decode = ENCODING.decode


def test_chunks_never_split_a_character() -> None:
    text = "Zürich ☕ 東京 naïve 🙂🙂 ok"
    tokens = ENCODING.encode(text, allowed_special=set(), disallowed_special=())
    chunks = token_chunks(tokens, decode)
    assert "".join(c.text for c in chunks) == text
    assert sum(c.tokens for c in chunks) == len(tokens)
    assert any(c.tokens > 1 for c in chunks)  # some character spans tokens
    assert all(c.text for c in chunks)


def test_cut_inside_a_character_drops_the_partial_bytes() -> None:
    tokens = ENCODING.encode("a 🦜", allowed_special=set(), disallowed_special=())
    assert len(tokens) == 4  # "a", " " + 2 bytes of the parrot, then 1 byte, 1 byte
    chunks = token_chunks(tokens[:-1], decode)
    assert [c.text for c in chunks] == ["a", " "]
    assert sum(c.tokens for c in chunks) == 3
    whole = token_chunks(tokens, decode)
    assert [(c.text, c.tokens) for c in whole] == [("a", 1), (" 🦜", 3)]


class FakeTime:
    """A clock that only moves when the pacer sleeps, plus extra lag per sleep."""

    def __init__(self, lag: float = 0.0) -> None:
        self.now = 100.0
        self.lag = lag
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds + self.lag


async def collect(chunks, tps, fake: FakeTime, start: float):
    out = []
    async for chunk in paced(chunks, tps, start, clock=fake.clock, sleep=fake.sleep):
        out.append((fake.now, chunk))
    return out


async def test_each_token_at_its_due_time() -> None:
    fake = FakeTime()
    chunks = [Chunk(str(i), 1) for i in range(5)]
    out = await collect(chunks, 10.0, fake, start=fake.now)
    assert [c.text for _, c in out] == ["0", "1", "2", "3", "4"]
    assert [round(t - 100.0, 6) for t, _ in out] == [0.0, 0.1, 0.2, 0.3, 0.4]


async def test_late_wakeups_batch_due_tokens_without_drift() -> None:
    fake = FakeTime(lag=0.25)  # every sleep oversleeps by 2.5 token intervals
    chunks = [Chunk("x", 1) for _ in range(20)]
    out = await collect(chunks, 10.0, fake, start=fake.now)
    assert sum(c.tokens for _, c in out) == 20
    assert any(c.tokens > 1 for _, c in out)
    # Never early, and at most one wake-up late: no accumulated drift.
    emitted = 0
    for at, chunk in out:
        emitted += chunk.tokens
        due_last = 100.0 + (emitted - 1) * 0.1
        assert due_last <= at + 1e-9
        assert at - due_last <= 0.1 + 0.25 + 1e-9
    assert out[-1][0] - 100.0 < 1.9 + 0.35


async def test_multi_token_chunk_waits_for_its_last_token() -> None:
    fake = FakeTime()
    out = await collect([Chunk("ab", 3), Chunk("c", 1)], 10.0, fake, start=fake.now)
    assert [(round(t - 100.0, 6), c.tokens) for t, c in out] == [(0.2, 3), (0.3, 1)]


async def test_start_in_the_past_releases_everything_due() -> None:
    fake = FakeTime()
    out = await collect([Chunk("x", 1)] * 10, 10.0, fake, start=fake.now - 0.45)
    assert out[0][1].tokens == 5 and out[0][0] == 100.0


async def test_rejects_non_positive_speed() -> None:
    with pytest.raises(ValueError):
        await collect([Chunk("x", 1)], 0.0, FakeTime(), 0.0)


@pytest.mark.parametrize("tps", [65.0, 1000.0, 4000.0])
async def test_real_time_speed_is_accurate(tps: float) -> None:
    # The one place where timing is the behaviour: ~1.2 s of real pacing.
    count = int(tps * 1.2) + 1
    chunks = [Chunk("t", 1)] * count
    start = time.monotonic() + 0.01
    first = last = None
    tokens = 0
    async for chunk in paced(chunks, tps, start):
        last = time.monotonic()
        first = first or last
        tokens += chunk.tokens
    assert tokens == count and first is not None and last is not None
    achieved = (count - 1) / (last - start)
    assert achieved == pytest.approx(tps, rel=0.15)
    assert first - start < 0.05


async def test_min_tokens_groups_tokens_each_delta_at_its_last_tokens_due_time() -> None:
    fake = FakeTime()
    chunks = [Chunk(str(i % 10), 1) for i in range(18)]
    out = await collect_every(chunks, 1000.0, fake, min_tokens=10)
    # The first token alone (the time to first token), then 10 tokens, then the rest.
    assert [c.tokens for _, c in out] == [1, 10, 7]
    assert [round((t - 100.0) * 1000, 6) for t, _ in out] == [0.0, 10.0, 17.0]
    assert "".join(c.text for _, c in out) == "".join(c.text for c in chunks)


async def test_min_tokens_keeps_every_token_on_or_after_its_due_time_and_the_rate() -> None:
    fake = FakeTime(lag=0.0003)  # late wake-ups on top of the grouping
    chunks = [Chunk("ab", 3), *(Chunk("x", 1) for _ in range(40)), Chunk("é", 2)]
    out = await collect_every(chunks, 1000.0, fake, min_tokens=4)
    assert "".join(c.text for _, c in out) == "ab" + "x" * 40 + "é"
    assert sum(c.tokens for _, c in out) == 45
    assert out[0][1].tokens == 3  # the first chunk: what is due at start
    emitted = 0
    for at, chunk in out:
        emitted += chunk.tokens
        assert 100.0 + (emitted - 1) * 0.001 <= at + 1e-9  # never early
        if chunk is not out[0][1]:
            assert chunk.tokens >= 4 or emitted == 45  # a group, or the rest
    assert out[-1][0] - 100.0 == pytest.approx(0.044, abs=0.0004)  # the last token on time


async def test_one_token_per_delta_is_the_default() -> None:
    chunks = [Chunk(str(i), 1) for i in range(5)]
    plain, grouped = FakeTime(), FakeTime()
    assert await collect(chunks, 65.0, plain, start=plain.now) == await collect_every(
        chunks, 65.0, grouped, min_tokens=1
    )


async def test_rejects_fewer_than_one_token_per_delta() -> None:
    with pytest.raises(ValueError):
        await collect_every([Chunk("x", 1)], 10.0, FakeTime(), min_tokens=0)


@pytest.mark.parametrize("tps", [1000.0, 4000.0])
async def test_real_time_speed_with_several_tokens_per_delta_is_accurate(tps: float) -> None:
    count = int(tps * 1.2) + 1
    start = time.monotonic() + 0.01
    arrivals = []
    async for chunk in paced([Chunk("t", 1)] * count, tps, start, min_tokens=10):
        arrivals.append((time.monotonic(), chunk.tokens))
    assert sum(tokens for _, tokens in arrivals) == count
    # The first delta is what is due when the pacer wakes at the start, not a group of
    # min_tokens: at most the tokens due by its arrival (a loaded machine wakes late).
    first_at, first_tokens = arrivals[0]
    assert first_at - start < 0.25  # prompt, not held for a group (it is 1.2 s of tokens)
    assert first_tokens <= 1 + int((first_at - start) * tps) + 1
    achieved = (count - 1) / (arrivals[-1][0] - start)
    assert achieved == pytest.approx(tps, rel=0.15)
    assert len(arrivals) < count / 5


async def collect_every(chunks, tps, fake: FakeTime, *, min_tokens: int):
    out = []
    async for chunk in paced(
        chunks, tps, fake.now, min_tokens=min_tokens, clock=fake.clock, sleep=fake.sleep
    ):
        out.append((fake.now, chunk))
    return out
