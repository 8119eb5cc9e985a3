"""A clock the test moves by hand: expiry, pacing and leases tested without sleeping."""

from __future__ import annotations


class ManualClock:
    """Callable as `time.monotonic` is; `now` is whatever the test sets."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now
