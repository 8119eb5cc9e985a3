"""Single flight (labgate/core/coalesce.py): concurrent callers of one key share one run."""

from __future__ import annotations

import asyncio

import pytest

from labgate.core.coalesce import Coalescer


class _Work:
    """Work that counts its runs and ends when told."""

    def __init__(self, answer: str = "done", error: Exception | None = None) -> None:
        self.runs = 0
        self.release = asyncio.Event()
        self.answer, self.error = answer, error

    async def __call__(self) -> str:
        self.runs += 1
        await self.release.wait()
        if self.error is not None:
            raise self.error
        return f"{self.answer} {self.runs}"


def test_concurrent_callers_of_one_key_share_one_run() -> None:
    async def run() -> None:
        flights: Coalescer[str, str] = Coalescer()
        work = _Work()
        callers = [asyncio.ensure_future(flights.run("inventory", work)) for _ in range(32)]
        await asyncio.sleep(0)  # every caller has asked
        assert flights.running("inventory") is not None
        work.release.set()
        assert await asyncio.gather(*callers) == ["done 1"] * 32
        assert work.runs == 1
        assert flights.running("inventory") is None
        assert len(flights) == 0

    asyncio.run(run())


def test_other_keys_run_apart_and_a_run_ended_is_not_joined() -> None:
    async def run() -> None:
        flights: Coalescer[str, str] = Coalescer()
        a, b = _Work("a"), _Work("b")
        a.release.set()
        b.release.set()
        assert list(await asyncio.gather(flights.run("a", a), flights.run("b", b))) == ["a 1", "b 1"]
        assert await flights.run("a", a) == "a 2", "the next caller after the run ended starts afresh"

    asyncio.run(run())


def test_every_caller_gets_the_runs_error_and_the_next_caller_runs_again() -> None:
    async def run() -> None:
        flights: Coalescer[str, str] = Coalescer()
        work = _Work(error=OSError("OPA unreachable"))
        callers = [asyncio.ensure_future(flights.run("k", work)) for _ in range(3)]
        await asyncio.sleep(0)
        work.release.set()
        outcomes = await asyncio.gather(*callers, return_exceptions=True)
        assert [str(o) for o in outcomes] == ["OPA unreachable"] * 3
        work.error = None
        assert await flights.run("k", work) == "done 2"

    asyncio.run(run())


def test_a_caller_that_gives_up_does_not_cancel_the_run_for_the_others() -> None:
    async def run() -> None:
        flights: Coalescer[str, str] = Coalescer()
        work = _Work()
        first = asyncio.ensure_future(flights.run("k", work))
        second = asyncio.ensure_future(flights.run("k", work))
        await asyncio.sleep(0)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        work.release.set()
        assert await second == "done 1"
        assert work.runs == 1

    asyncio.run(run())
