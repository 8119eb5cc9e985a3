"""The admission gate (pure): a bound on requests decided at once, its slots shared fairly by tenants.

The bound on admission requests one replica decides at once, and the fair line of those waiting
for a slot (pure: who gets the next slot, whether a request waits or is refused; the waiting itself
is webhook/admission_line.py's).

A request that finds no slot waits for one (first come, first served within its tenant) instead of
being refused: a Job controller's burst of creates is a few hundred requests at once, which the
replica decides in well under a second. A freed slot goes to the waiting tenant that holds the
fewest slots, so another tenant's request that arrives during one tenant's burst gets the next free
slot, ahead of the burst's own queued requests. One tenant may hold at most its share of the slots
(by default all but an eighth), so a flood whose decisions hang (a slow API read) still leaves
slots free for every other tenant (issue 19, finding 8). Requests outside any tenant's namespace
share one share of their own.

A request is refused with [admission-overloaded] only when the line is full (its bound keeps the
memory of waiting requests bounded), or when it has waited its bound (issue 21: refusals only
past what the replica sustains). When the line is full and the newcomer's tenant has fewer waiting
than the tenant with the most, that tenant's newest waiter gives its place up instead: one tenant's
burst does not refuse another tenant's pods.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Literal

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


@dataclass(eq=False)
class Ticket:
    """One admission request at the gate (compared by identity: two requests are two tickets)."""

    tenant: str
    arrived: float  # monotonic seconds


Verdict = Literal["enter", "wait", "refuse"]
# Why a request got no slot: the line was full when it came, it waited its bound, or it gave its
# place in a full line up to another tenant's request.
Refused = Literal["line-full", "waited", "pushed-out"]


@dataclass(frozen=True)
class Arrival:
    """What the gate decided for an arriving request: it holds a slot, waits in line, or is refused
    (the line is full); and the waiter that gave its place up to it, if one did."""

    verdict: Verdict
    ticket: Ticket
    pushed_out: Ticket | None = None


class AdmissionGate:
    """Counts the requests being decided, in all and per tenant, and the requests waiting for a
    slot, per tenant in arrival order."""

    RATE_WINDOW_SECONDS = 5.0

    def __init__(self, limit: int, *, tenant_limit: int | None = None, max_waiting: int | None = None):
        self.limit = limit
        self.tenant_limit = min(limit, tenant_limit if tenant_limit is not None else limit)
        self.max_waiting = max_waiting if max_waiting is not None else 4 * limit
        self.in_flight = 0
        self.held: Counter[str] = Counter()  # tenant -> its requests being decided
        self.waiting: dict[str, deque[Ticket]] = {}  # tenant -> its requests waiting, oldest first
        self.waiting_count = 0
        self._arrivals: deque[float] = deque()  # monotonic times of the last few seconds' requests
        self.arrived = 0  # requests that arrived, ever

    def rate(self) -> float:
        """Admission requests per second over the last few seconds."""
        horizon = time.monotonic() - self.RATE_WINDOW_SECONDS
        while self._arrivals and self._arrivals[0] < horizon:
            self._arrivals.popleft()
        return len(self._arrivals) / self.RATE_WINDOW_SECONDS

    def arrive(self, tenant: str = NO_TENANT, *, now: float | None = None) -> Arrival:
        """One request of `tenant` arrives: it enters (holds a slot) when one is free to it and none
        of its tenant's waits before it; else it waits, unless the line is full."""
        now = time.monotonic() if now is None else now
        self._arrivals.append(now)
        self.arrived += 1
        self.rate()  # drops arrivals older than the window
        ticket = Ticket(tenant, now)
        if self._may_enter(tenant) and not self.waiting.get(tenant):
            self._enter(tenant)
            return Arrival("enter", ticket)
        pushed_out = None
        if self.waiting_count >= self.max_waiting:
            pushed_out = self._push_out_for(tenant)
            if pushed_out is None:
                return Arrival("refuse", ticket)
        self.waiting.setdefault(tenant, deque()).append(ticket)
        self.waiting_count += 1
        return Arrival("wait", ticket, pushed_out)

    def leave(self, tenant: str = NO_TENANT) -> Ticket | None:
        """One answered request of `tenant` gives its slot back; the waiting request it goes to (now
        counted in), if any."""
        self.in_flight -= 1
        self.held[tenant] -= 1
        if self.held[tenant] <= 0:
            del self.held[tenant]
        return self._hand_over()

    def withdraw(self, ticket: Ticket) -> bool:
        """A waiting request gives up (its wait bound passed, or its caller went away); False when
        it was not waiting (it holds a slot, or was refused)."""
        line = self.waiting.get(ticket.tenant)
        if line is None or ticket not in line:
            return False
        line.remove(ticket)
        self._forget_line(ticket.tenant)
        return True

    def waiting_of(self, tenant: str) -> int:
        """How many of `tenant`'s requests wait for a slot."""
        line = self.waiting.get(tenant)
        return len(line) if line else 0

    def refusal(self, ticket: Ticket, cause: Refused, *, now: float | None = None) -> Refusal:
        """Why the request of `ticket` gets no slot, with the numbers: its tenant's share when that
        is what held it back (or it gave its place up to another tenant), else the replica's bound
        (the line full, or its wait bound passed)."""
        now = time.monotonic() if now is None else now
        waited_ms = max(0.0, now - ticket.arrived) * 1000
        tenant = ticket.tenant
        held_back_by_share = self.in_flight < self.limit and self.held[tenant] >= self.tenant_limit
        if cause == "pushed-out" or (cause == "waited" and held_back_by_share):
            return refusals.tenant_overloaded(
                tenant=tenant or None,
                held=self.held[tenant],
                waiting=self.waiting_of(tenant),
                limit=self.limit,
                waited_ms=waited_ms,
                rate=self.rate(),
                pushed_out=cause == "pushed-out",
            )
        return refusals.overloaded(
            in_flight=self.in_flight,
            waiting=self.waiting_count,
            waited_ms=waited_ms,
            rate=self.rate(),
            line_full=cause == "line-full",
        )

    def _may_enter(self, tenant: str) -> bool:
        return self.in_flight < self.limit and self.held[tenant] < self.tenant_limit

    def _enter(self, tenant: str) -> None:
        self.in_flight += 1
        self.held[tenant] += 1

    def _forget_line(self, tenant: str) -> None:
        self.waiting_count -= 1
        if not self.waiting[tenant]:
            del self.waiting[tenant]

    def _hand_over(self) -> Ticket | None:
        """The free slot to the oldest waiter of the waiting tenant that holds the fewest slots (of
        those under their share); ties go to the tenant whose oldest waiter came first."""
        if self.in_flight >= self.limit:
            return None
        eligible = [t for t in self.waiting if self.held[t] < self.tenant_limit]
        if not eligible:
            return None
        tenant = min(eligible, key=lambda t: (self.held[t], self.waiting[t][0].arrived))
        ticket = self.waiting[tenant].popleft()
        self._forget_line(tenant)
        self._enter(tenant)
        return ticket

    def _push_out_for(self, tenant: str) -> Ticket | None:
        """The line is full: the newest waiter of the tenant with the most waiting gives its place
        up, when that tenant has at least two more waiting than `tenant` (else `tenant`'s request
        is the one refused)."""
        if not self.waiting:
            return None
        most = max(self.waiting, key=lambda t: (len(self.waiting[t]), self.held[t]))
        if len(self.waiting[most]) < self.waiting_of(tenant) + 2:
            return None
        ticket = self.waiting[most].pop()
        self._forget_line(most)
        return ticket
