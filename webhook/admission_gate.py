"""The bound on admission requests one replica decides at once, shared fairly between tenants (pure).

Past the bound a request is refused at once, with the rate, rather than queued until the
apiserver's timeout: latency stays flat under overload and the apiserver's other replicas (or the
client's retry) take the rest. One tenant may hold at most its share of the slots (by default half
of them), so a flood of one tenant's requests leaves the rest of the replica to every other tenant
(issue 19, finding 8). Requests outside any tenant's namespace share one share of their own.
"""

from __future__ import annotations

import time
from collections import Counter, deque

from webhook import refusals
from webhook.refusals import Refusal
from webhook.review import AdmissionRequest

# The share key of requests no tenant owns (cluster-scoped objects, namespaces of no tenant).
NO_TENANT = ""


def request_namespace(request: AdmissionRequest) -> str | None:
    """The namespace whose tenant owns `request` (a Namespace owns itself)."""
    if request.namespace:
        return request.namespace
    return request.name if request.kind.kind == "Namespace" else None


class AdmissionGate:
    """Counts the requests being decided, in all and per tenant; `arrive` says whether one more may be."""

    RATE_WINDOW_SECONDS = 5.0

    def __init__(self, limit: int, *, tenant_limit: int | None = None):
        self.limit = limit
        self.tenant_limit = min(limit, tenant_limit if tenant_limit is not None else limit)
        self.in_flight = 0
        self.held: Counter[str] = Counter()  # tenant -> its requests being decided
        self._arrivals: deque[float] = deque()  # monotonic times of the last few seconds' requests

    def rate(self) -> float:
        """Admission requests per second over the last few seconds."""
        horizon = time.monotonic() - self.RATE_WINDOW_SECONDS
        while self._arrivals and self._arrivals[0] < horizon:
            self._arrivals.popleft()
        return len(self._arrivals) / self.RATE_WINDOW_SECONDS

    def arrive(self, tenant: str = NO_TENANT) -> bool:
        """Count one request of `tenant` in; False when it must be refused (the replica's bound, or
        the tenant's share, is reached)."""
        self._arrivals.append(time.monotonic())
        self.rate()  # drops arrivals older than the window
        if self.in_flight >= self.limit or self.held[tenant] >= self.tenant_limit:
            return False
        self.in_flight += 1
        self.held[tenant] += 1
        return True

    def leave(self, tenant: str = NO_TENANT) -> None:
        """Count one answered request of `tenant` out."""
        self.in_flight -= 1
        self.held[tenant] -= 1
        if self.held[tenant] <= 0:
            del self.held[tenant]

    def refusal(self, request: AdmissionRequest, tenant: str = NO_TENANT) -> Refusal:
        """Why `request` of `tenant` was not let in: the tenant's share when it holds all of it,
        else the replica's bound."""
        if self.in_flight < self.limit and self.held[tenant] >= self.tenant_limit:
            return refusals.tenant_overloaded(
                tenant=tenant or None,
                held=self.held[tenant],
                limit=self.limit,
                rate=self.rate(),
            )
        return refusals.overloaded(in_flight=self.in_flight, rate=self.rate())
