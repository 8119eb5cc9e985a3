"""Refusing honestly beyond capacity: a bounded number of admission requests in progress at once.

A replica that takes every request it is sent past what it can decide queues them without bound:
latency grows until the apiserver's timeout and everyone gets `[policy-engine-unavailable]` or
"context deadline exceeded". Instead, at most `limit` requests are in progress in a replica (being
decided, or waiting for their tenant's GPU batch); the next one is refused at once with
`[admission-overloaded]`, the rate the replica is answering and what to do. Kubernetes controllers
(Jobs, ReplicaSets) retry a refused pod creation by themselves, with back-off.
"""

from __future__ import annotations

import time
from collections import deque

from webhook.review import AdmissionRequest, AdmissionResponse, ResponseStatus


class AdmissionGate:
    """Counts the admission requests in progress and says whether one more may start."""

    def __init__(self, limit: int):
        self.limit = limit
        self.in_progress = 0
        self._clock = time.monotonic
        self._finished: deque[float] = deque()

    def try_enter(self) -> bool:
        """Start one request, unless `limit` are in progress already."""
        if self.in_progress >= self.limit:
            return False
        self.in_progress += 1
        return True

    def leave(self) -> None:
        """One request finished (answered, refused or failed)."""
        self.in_progress -= 1
        now = self._clock()
        self._finished.append(now)
        while self._finished and self._finished[0] < now - 1.0:
            self._finished.popleft()

    def rate(self) -> int:
        """Requests finished in the last second."""
        now = self._clock()
        while self._finished and self._finished[0] < now - 1.0:
            self._finished.popleft()
        return len(self._finished)


def overloaded_response(request: AdmissionRequest, *, limit: int, rate: int) -> AdmissionResponse:
    """The refusal beyond capacity (code 429, so clients and controllers back off and retry)."""
    message = (
        f"[admission-overloaded] labgate's webhook is deciding {limit} requests at once, the most one "
        f"replica takes (it answers about {rate} per second), so it refused this one rather than make it "
        "wait. Fix: retry in a few seconds (Jobs and other controllers retry by themselves); if it "
        "persists, tell the infra team to add webhook replicas or raise LABGATE_MAX_CONCURRENT_ADMISSIONS"
    )
    return AdmissionResponse(
        uid=request.uid,
        allowed=False,
        status=ResponseStatus(code=429, reason="TooManyRequests", message=message),
    )
