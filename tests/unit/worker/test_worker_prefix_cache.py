from __future__ import annotations

import pytest

from turnpike.worker.prefix_cache import BLOCK_SIZE, PrefixCache


def prompt(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def test_block_size_is_64() -> None:
    assert BLOCK_SIZE == 64
    assert PrefixCache(1000).block_size == 64


def test_miss_then_full_hit_on_full_blocks_only() -> None:
    cache = PrefixCache(10_000)
    tokens = prompt(200)  # 3 full blocks + 8 tokens
    assert cache.lookup_and_insert(tokens) == 0
    assert cache.cached_tokens == 192
    assert cache.lookup_and_insert(tokens) == 192
    assert cache.lookup_and_insert([*tokens, 7, 7, 7]) == 192


def test_partial_hit_is_the_shared_leading_blocks() -> None:
    cache = PrefixCache(10_000)
    base = prompt(256)
    cache.lookup_and_insert(base)
    diverged = base[:130] + [999_999] * 126  # differs inside block 3 (tokens 128..191)
    assert cache.lookup_and_insert(diverged) == 128
    # A later block that matches alone does not count: keys identify whole prefixes.
    shifted = [5, *base[1:]]
    assert cache.lookup_and_insert(shifted) == 0


def test_conversation_growth_hits_previous_turn() -> None:
    cache = PrefixCache(100_000)
    turn1 = prompt(1000)
    turn2 = turn1 + prompt(500, start=50_000)
    cache.lookup_and_insert(turn1)
    assert cache.lookup_and_insert(turn2) == 960  # 15 full blocks of turn 1


def test_namespaces_do_not_share() -> None:
    cache = PrefixCache(10_000)
    cache.lookup_and_insert(prompt(128), namespace="model-a")
    assert cache.lookup_and_insert(prompt(128), namespace="model-b") == 0
    assert cache.lookup_and_insert(prompt(128), namespace="model-a") == 128


def test_bounded_size_and_lru_eviction() -> None:
    cache = PrefixCache(capacity_tokens=4 * 64)  # 4 blocks
    a, b, c = prompt(128, 0), prompt(128, 10_000), prompt(128, 20_000)
    cache.lookup_and_insert(a)
    cache.lookup_and_insert(b)
    assert cache.cached_tokens == 256
    assert cache.lookup_and_insert(a) == 128  # a is now the most recent
    cache.lookup_and_insert(c)  # evicts b, the least recently used
    assert cache.cached_tokens == 256
    assert cache.lookup_and_insert(a) == 128
    assert cache.lookup_and_insert(c) == 128
    assert cache.lookup_and_insert(b) == 0


def test_eviction_takes_branch_tails_before_shared_head() -> None:
    cache = PrefixCache(capacity_tokens=3 * 64)
    head = prompt(64)
    cache.lookup_and_insert(head + prompt(64, 1000))  # head + branch x
    cache.lookup_and_insert(head + prompt(64, 2000))  # head + branch y: evicts nothing yet
    cache.lookup_and_insert(head + prompt(64, 3000))  # must evict one block: x's tail
    assert cache.lookup_and_insert(head + prompt(64, 1000)) == 64  # head survived
    assert cache.lookup_and_insert(head + prompt(64, 3000)) == 128


def test_prompt_longer_than_cache_keeps_its_head() -> None:
    cache = PrefixCache(capacity_tokens=2 * 64)
    long = prompt(64 * 10)
    cache.lookup_and_insert(long)
    assert cache.cached_tokens == 128
    assert cache.lookup_and_insert(long) == 128


def test_zero_capacity_caches_nothing() -> None:
    cache = PrefixCache(0)
    cache.lookup_and_insert(prompt(500))
    assert cache.lookup_and_insert(prompt(500)) == 0
    assert cache.cached_tokens == 0


def test_invalid_settings() -> None:
    with pytest.raises(ValueError):
        PrefixCache(-1)
    with pytest.raises(ValueError):
        PrefixCache(100, block_size=0)
