"""Reading a busy watch a burst at a time instead of an event at a time.

The apiserver flushes every watch event on its own, so a reader that asks for the next one as soon as
it has handled the last wakes once per event (often twice: an event is more than one TLS record), and
that wake-up, not the parsing, is most of what an event costs a Python reader: about 160 µs of CPU a
pod event, against under 10 to parse it (docs/benchmarks.md, "What receiving an event costs").

`gathered` pauses for a short window whenever the connection holds nothing more to read, so the
events of a burst arrive while the reader sleeps and are then read back to back, without waiting on
the socket between them. It never pauses while anything is waiting to be read, so a reader keeps up
with any rate the connection carries (the apiserver ends a watch whose reader falls behind), and an
event is late by at most one window.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import Callable, Iterable, Iterator
from typing import Any


def gathered(
    chunks: Iterable[bytes], *, has_more: Callable[[], bool], pause: Callable[[], Any]
) -> Iterator[bytes]:
    """Every chunk of `chunks`, in order; after one, when `has_more()` says nothing is waiting to be
    read, `pause()` before the next read."""
    for chunk in chunks:
        yield chunk
        if not has_more():
            pause()


class ReadBacklog:
    """Whether a response's body has bytes that can be read without waiting: in the reader's buffer
    (`fp`, the buffered file the HTTP response reads from), decrypted and kept by the socket's TLS
    layer, or in the kernel's buffer. Found by one read that may not wait (the socket's timeout 0
    for it, then its own again): it fills the buffer with what is there, or finds nothing."""

    def __init__(self, fp: Any, sock: Any) -> None:
        self._fp = fp
        self._sock = sock

    def __call__(self) -> bool:
        try:
            timeout = self._sock.gettimeout()
            self._sock.settimeout(0)
        except OSError:
            return True  # the socket is gone: no pause, the next read meets what happened to it
        try:
            return bool(self._fp.peek(1))
        except (ssl.SSLWantReadError, BlockingIOError):
            return False  # nothing buffered and nothing received: a read would wait
        finally:
            with contextlib.suppress(OSError):
                self._sock.settimeout(timeout)
