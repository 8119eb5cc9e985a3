"""A replica gives back the memory a burst of admissions left free, once the burst is over.

Every connection the apiserver opens in a burst (HTTP/1.1: one per concurrent call) and every request
parsed allocates through the C library's allocator, from the event loop's thread and the worker
threads alike. glibc keeps what is freed in its arenas for the next allocation and hands pages back to
the system only from the top of each heap, so a replica stayed at the size of its busiest burst
(docs/benchmarks.md, "Memory under an open-loop flood"). `malloc_trim(0)` gives the free pages of
every arena back. It is called when a window of admissions is quiet after a busy one: never in the
middle of a burst (the pages would be asked for again at once), never on a replica that stays idle.
Where the C library has no `malloc_trim` (musl, macOS) nothing is trimmed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from labgate.core.metrics import MEMORY_RETURNS

log = logging.getLogger(__name__)

# A window with at least this many admission requests is a burst (10 a second over the default 10 s).
BURST_ARRIVALS_PER_SECOND = 10
# A window with at most this share of the busiest window since the last trim ends the burst.
QUIET_SHARE = 0.1


def allocator_trim() -> Callable[[], None] | None:
    """The C library's `malloc_trim(0)`, or None where there is none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def call() -> None:
        trim(0)  # a CDLL call lets go of the GIL while it runs

    return call


@dataclass
class BurstEnd:
    """Whether a window's admission requests end a burst: the busiest window since the last trim
    held at least `burst` requests and this one at most `QUIET_SHARE` of it."""

    burst: int
    busiest: int = 0

    def after_window(self, arrivals: int) -> bool:
        self.busiest = max(self.busiest, arrivals)
        if self.busiest >= self.burst and arrivals <= QUIET_SHARE * self.busiest:
            self.busiest = arrivals
            return True
        return False


async def return_memory_after_bursts(
    arrived: Callable[[], int], *, window_seconds: float, trim: Callable[[], None]
) -> None:
    """Every `window_seconds`, the requests `arrived` counted since the last look; `trim` (in a
    thread: it works through the allocator's arenas one lock at a time, some 0.25 ms for each MB it
    gives back) after each burst. Runs until cancelled."""
    burst_end = BurstEnd(burst=max(1, round(BURST_ARRIVALS_PER_SECOND * window_seconds)))
    seen = arrived()
    while True:
        await asyncio.sleep(window_seconds)
        count = arrived()
        if burst_end.after_window(count - seen):
            await asyncio.to_thread(trim)
            MEMORY_RETURNS.inc()
            log.debug("admission burst over: the allocator's free memory given back")
        seen = count


@contextlib.asynccontextmanager
async def returning_memory(arrived: Callable[[], int], *, window_seconds: float) -> AsyncIterator[None]:
    """While the app serves: `return_memory_after_bursts` as a task of the running loop, where the C
    library can give memory back and `window_seconds` is not 0."""
    trim = allocator_trim()
    if trim is None or window_seconds == 0:
        yield
        return
    task = asyncio.create_task(return_memory_after_bursts(arrived, window_seconds=window_seconds, trim=trim))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
