"""The one cache helper (labgate.core.expiring_cache): expiry at the time to live, least recently used first out."""

from __future__ import annotations

from labgate.core.expiring_cache import ExpiringCache, Held
from tests.manual_clock import ManualClock


def test_entries_expire_at_their_time_to_live_and_the_least_recently_used_go_first() -> None:
    clock = ManualClock(1000.0)
    cache: ExpiringCache[str, int] = ExpiringCache(2, clock)
    cache.put("a", 1, ttl=10)
    cache.put("b", 2, ttl=10)
    assert cache.get("a") == Held(1, 0.0)  # a is now the most recently used
    cache.put("c", 3, ttl=10)
    assert cache.get("b") is None
    clock.now += 5
    assert cache.get("a") == (1, 5.0)
    clock.now += 4.999
    held = cache.get("a")
    assert held is not None
    assert held.value == 1
    clock.now += 0.001  # exactly 10 s old: gone
    assert cache.get("a") is None
    cache.put("z", 9, ttl=0)  # a time to live of 0: not kept at all
    assert cache.get("z") is None
    assert len(cache) == 1


def test_a_new_value_restarts_the_time_to_live() -> None:
    clock = ManualClock(1000.0)
    cache: ExpiringCache[str, str] = ExpiringCache(4, clock)
    cache.put("k", "old", ttl=2)
    clock.now += 1.5
    cache.put("k", "new", ttl=2)
    clock.now += 1.5
    assert cache.get("k") == Held("new", 1.5)


def test_expired_answers_are_not_held_until_the_bound_pushes_them_out() -> None:
    """A burst of answers that are never asked for again (pods all unlike each other) is let go as
    new answers come once it has expired, not kept up to `max_entries` (issue 21's memory target)."""
    clock = ManualClock(1000.0)
    cache: ExpiringCache[int, bytes] = ExpiringCache(4096, clock)
    for i in range(1000):
        cache.put(i, b"decision", ttl=2)
    assert len(cache) == 1000
    clock.now += 2
    cache.put(-1, b"next", ttl=2)
    assert len(cache) == 1, "only the answer still within its time to live"
    assert cache.get(-1) == Held(b"next", 0.0)
