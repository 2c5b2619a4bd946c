"""The shared bounded LRU mapping."""

import pytest

from turnpike.lru import LruCache


def test_the_least_recently_used_leaves_first_and_peek_does_not_use() -> None:
    cache: LruCache[str, int] = LruCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1  # not a use: "a" stays the oldest
    cache.put("c", 3)
    assert "a" not in cache and len(cache) == 2
    assert cache.get("b") == 2  # a use: "c" is now the oldest
    cache.put("d", 4)
    assert cache.peek("c") is None and cache.peek("b") == 2
    assert cache.pop("b") == 2 and cache.pop("b") is None and len(cache) == 1


def test_it_needs_room() -> None:
    with pytest.raises(ValueError):
        LruCache(0)
