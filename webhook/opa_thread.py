"""A private event loop on a thread of its own, for blocking callers of OPA's async clients.

The inventory and policy writers and the scheduled audit run on threads; OPA's clients (labgate's
`OpaSession`, opa-python-client's `AsyncOpaClient`) are async. Each blocking client owns one
`LoopThread`: its coroutines run there, never on the webhook's admission loop, and the caller waits
for the answer with a deadline. `close(closer)` runs the client's own closing coroutine on that loop,
then ends the thread; a loop dropped without `close()` is ended the same way by a finalizer.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")

Closer = Callable[[], Coroutine[Any, Any, None]]


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        loop.close()


async def _close_and_stop(closer: Closer, loop: asyncio.AbstractEventLoop) -> None:
    try:
        await closer()
    finally:
        loop.stop()


def _shut_down(closer: Closer, loop: asyncio.AbstractEventLoop) -> None:
    """Run `closer` on the loop, then end the loop's thread (from any thread; never waits)."""
    if not loop.is_closed():
        asyncio.run_coroutine_threadsafe(_close_and_stop(closer, loop), loop)


class LoopThread:
    """One event loop running on a daemon thread named `name`; `run` waits up to `deadline` seconds."""

    def __init__(self, name: str, *, deadline: float, closer: Closer):
        self.deadline = deadline
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=_serve, args=(self._loop,), name=name, daemon=True)
        self._thread.start()
        self._shut_down = weakref.finalize(self, _shut_down, closer, self._loop)

    def run(self, call: Coroutine[Any, Any, _T]) -> _T:
        """`call`'s result, run on the loop (its exception raised here)."""
        return asyncio.run_coroutine_threadsafe(call, self._loop).result(timeout=self.deadline)

    def close(self) -> None:
        self._shut_down()
        self._thread.join(timeout=5)
