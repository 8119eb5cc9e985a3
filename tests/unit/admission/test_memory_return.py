"""When a replica gives the allocator's free memory back (webhook/memory_return.py): once a burst of
admissions is over, never in its middle, never while traffic stays steady or the replica idle. What the
giving back does to the replica's size is tests/unit/admission/test_serve_memory.py's."""

from __future__ import annotations

import asyncio

from webhook.memory_return import BurstEnd, allocator_trim, return_memory_after_bursts, returning_memory


def trims(windows: list[int], burst: int = 100) -> list[int]:
    """The windows (by index) after which the memory is given back."""
    end = BurstEnd(burst=burst)
    return [i for i, arrivals in enumerate(windows) if end.after_window(arrivals)]


def test_the_memory_is_given_back_once_when_a_burst_is_over() -> None:
    assert trims([0, 3, 800, 2000, 1500, 40, 2, 0, 0]) == [5]


def test_a_burst_that_fades_slowly_is_over_at_a_tenth_of_its_busiest_window() -> None:
    assert trims([1000, 600, 300, 150, 101, 99, 50]) == [5]


def test_steady_traffic_or_an_idle_replica_never_trims() -> None:
    assert trims([300] * 20) == []
    assert trims([0] * 20) == []
    assert trims([5, 0, 9, 0, 99, 0]) == []  # below a burst


def test_each_burst_is_followed_by_its_own_trim() -> None:
    assert trims([500, 0, 0, 0, 700, 10, 0]) == [1, 5]


def test_the_watch_trims_after_a_burst_until_cancelled() -> None:
    arrived = 0
    trimmed: list[int] = []

    async def run() -> None:
        nonlocal arrived
        task = asyncio.create_task(
            return_memory_after_bursts(
                lambda: arrived, window_seconds=0.05, trim=lambda: trimmed.append(arrived)
            )
        )
        await asyncio.sleep(0)  # the watch takes its first count
        arrived = 50  # a burst within the first window (at least 10 a second's worth)
        for _ in range(200):
            if trimmed:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()

    asyncio.run(run())
    assert trimmed == [50]


def test_this_platform_s_c_library_can_give_memory_back() -> None:
    trim = allocator_trim()
    assert trim is not None  # glibc, as in the chart's image (python:3.11-slim)
    trim()


def test_the_watch_runs_while_the_app_serves_and_not_at_all_when_turned_off() -> None:
    async def tasks_while_serving(window_seconds: float) -> int:
        async with returning_memory(lambda: 0, window_seconds=window_seconds):
            serving = len(asyncio.all_tasks())
        assert len(asyncio.all_tasks()) == 1  # stopped with the app: only this coroutine is left
        return serving - 1

    assert asyncio.run(tasks_while_serving(10)) == 1
    assert asyncio.run(tasks_while_serving(0)) == 0
