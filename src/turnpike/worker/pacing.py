"""Token pacing: the decode half of the simulator's model time.

Token ``i`` of an output (0-based) is due at ``start + i / tokens_per_second``,
measured from the absolute start of decode, never from the previous emission, so
late wake-ups (timer granularity, a busy event loop, a slow consumer) cannot make
the stream drift. Whatever is due when the pacer wakes goes out as one chunk: at
4000 tok/s a millisecond timer tick releases several tokens at once.

A stream can be made coarser (``min_tokens``): after the first token, each delta
waits until it holds ``min_tokens`` tokens (or the rest of the output) and leaves when
its last token is due. Every token still leaves no earlier than due, the first and the
last exactly on time, so the time to first token and the rate are unchanged; there are
only fewer deltas, each costing the stream its own message.

Chunks never split a UTF-8 character: a token that ends inside a multi-byte
character is grouped with the tokens that complete it (see :func:`token_chunks`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Chunk:
    text: str
    tokens: int


def token_chunks(tokens: Sequence[int], decode: Callable[[Sequence[int], str], str]) -> list[Chunk]:
    """Group tokens into chunks whose text is whole characters.

    ``decode(tokens, errors)`` is the encoding's decoder (UTF-8 ``errors`` handling):
    strict decoding fails on tokens that end mid-character, which then wait for the
    tokens completing them. A trailing partial character (an output cut at its token
    limit) keeps its token count and drops the incomplete bytes.
    """
    chunks: list[Chunk] = []
    group: list[int] = []
    for token in tokens:
        group.append(token)
        try:
            text = decode(group, "strict")
        except UnicodeDecodeError:
            continue
        chunks.append(Chunk(text, len(group)))
        group = []
    if group:
        chunks.append(Chunk(decode(group, "ignore"), len(group)))
    return chunks


async def paced(
    chunks: Sequence[Chunk],
    tokens_per_second: float,
    start: float,
    *,
    min_tokens: int = 1,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> AsyncIterator[Chunk]:
    """Yield ``chunks`` merged into what is due, each at its absolute due time.

    A chunk is due when its last token is; ``start`` (a ``clock()`` time) is when
    the first token is due. The first delta is what is due at ``start``; each later
    one holds at least ``min_tokens`` tokens, or the rest of the output.
    """
    if tokens_per_second <= 0:
        raise ValueError("tokens_per_second must be > 0")
    if min_tokens < 1:
        raise ValueError("min_tokens must be >= 1")
    interval = 1.0 / tokens_per_second
    index = 0
    emitted = 0  # tokens already yielded
    while index < len(chunks):
        now = clock()
        end, count = index, 0  # chunks[index:end] are due, with `count` tokens
        while end < len(chunks):
            if start + (emitted + count + chunks[end].tokens - 1) * interval > now:
                break
            count += chunks[end].tokens
            end += 1
        wanted = min_tokens if emitted else 1
        if count >= wanted or (count and end == len(chunks)):
            emitted += count
            yield Chunk("".join(chunk.text for chunk in chunks[index:end]), count)
            index = end
            continue
        # Sleep until the chunk that completes the delta is due.
        last = end
        count += chunks[last].tokens
        while count < wanted and last + 1 < len(chunks):
            last += 1
            count += chunks[last].tokens
        await sleep(start + (emitted + count - 1) * interval - now)
