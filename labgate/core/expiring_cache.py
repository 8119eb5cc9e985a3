"""The one cache helper: entries that expire after their time to live, the least recently used
forgotten beyond a bound (pure; not thread-safe: each owner keeps it on one event loop or under its
own lock).

An entry put with `ttl` seconds is answered while it is younger than `ttl` and gone from the moment
it is `ttl` old (so a time to live of 2 s never answers with something 2 s old). Image facts
(`webhook.provenance.facts`) and decision reuse (`webhook.decision_reuse`) both keep their answers
here.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, NamedTuple, TypeVar

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")


class Held(NamedTuple, Generic[Value]):
    """A value the cache answered with, and how old it is (seconds)."""

    value: Value
    age: float


class ExpiringCache(Generic[Key, Value]):
    """A dict whose entries expire after their time to live and that keeps at most `max_entries`,
    forgetting the least recently used first."""

    def __init__(self, max_entries: int, clock: Callable[[], float] = time.monotonic):
        self._entries: OrderedDict[Key, tuple[float, float, Value]] = OrderedDict()
        self.max_entries = max_entries
        self._clock = clock

    def get(self, key: Key) -> Held[Value] | None:
        """The value and its age, or None when absent or expired (an expired entry is dropped)."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        stored_at, expires_at, value = entry
        now = self._clock()
        if now >= expires_at:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return Held(value, now - stored_at)

    def put(self, key: Key, value: Value, ttl: float) -> None:
        """Keep `value` for `ttl` seconds (a ttl of 0 or less keeps nothing)."""
        if ttl <= 0:
            return
        now = self._clock()
        self._entries[key] = (now, now + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        # Expired entries at the least recently used end go too: a burst's answers (a flood of pods
        # all unlike each other) are not held until the bound pushes them out.
        while self._entries:
            oldest = next(iter(self._entries.values()))
            if now < oldest[1]:
                break
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
