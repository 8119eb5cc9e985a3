"""Single flight (pure): concurrent callers asking for the same work share one run of it.

The work runs in a task of its own, so a caller that gives up (its deadline passed, it was
cancelled) does not cancel it for the others; it is forgotten the moment it ends, so the next
caller after that starts afresh (the answer is never kept: caching is the caller's business).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

Key = TypeVar("Key", bound=Hashable)
Value = TypeVar("Value")


class Coalescer(Generic[Key, Value]):
    """Runs of work by key: at most one at a time for each key, shared by all who ask meanwhile."""

    def __init__(self) -> None:
        self._flights: dict[Key, asyncio.Task[Value]] = {}

    def __len__(self) -> int:
        return len(self._flights)

    def running(self, key: Key) -> asyncio.Task[Value] | None:
        """The run for `key` under way, if there is one (to wait for it without joining it)."""
        return self._flights.get(key)

    async def run(self, key: Key, work: Callable[[], Awaitable[Value]]) -> Value:
        """The result of `work()`, or of the run for `key` already under way (its error, if it fails)."""
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.ensure_future(self._fly(key, work))
            self._flights[key] = flight
            flight.add_done_callback(lambda done: self._landed(key, done))
        return await asyncio.shield(flight)

    async def _fly(self, key: Key, work: Callable[[], Awaitable[Value]]) -> Value:
        try:
            return await work()
        finally:  # forgotten as it ends: a caller from now on finds no run and starts one
            if self._flights.get(key) is asyncio.current_task():
                del self._flights[key]

    def _landed(self, key: Key, flight: asyncio.Task[Value]) -> None:
        if self._flights.get(key) is flight:  # cancelled before it ever ran
            del self._flights[key]
        if not flight.cancelled():
            flight.exception()  # retrieved: an error every caller gave up on is not reported as lost
