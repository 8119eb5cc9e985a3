"""Admission requests waiting for a slot of the gate (asyncio): each waits until the gate hands it
a slot, gives its place up, its wait bound passes, or its caller goes away. Who gets a slot is the
gate's decision (webhook/admission_gate.py); this room only parks and wakes the waiters, and makes
sure a waiter that goes away never keeps, or gives back, a slot it does not hold."""

from __future__ import annotations

import asyncio
import time

from labgate.core.metrics import ADMISSION_OVERLOADED, ADMISSION_WAIT_SECONDS
from webhook.admission_gate import NO_TENANT, AdmissionGate, Refused, Ticket
from webhook.refusals import Refusal


class AdmissionLine:
    """The gate's waiting requests, each parked on a future that the gate's hand-over resolves: None
    for a slot, a refusal for a waiter that gave its place up to another tenant's request."""

    def __init__(self, gate: AdmissionGate, *, max_wait_seconds: float):
        self.gate = gate
        self.max_wait_seconds = max_wait_seconds
        self._waiters: dict[Ticket, asyncio.Future[Refusal | None]] = {}

    async def enter(self, tenant: str = NO_TENANT) -> Refusal | None:
        """None once this request of `tenant` holds a slot (give it back with `leave`); else why it
        gets none. Cancelled while waiting, it leaves the line and holds nothing."""
        arrival = self.gate.arrive(tenant)
        if arrival.pushed_out is not None:
            self._resolve(arrival.pushed_out, self._refusal(arrival.pushed_out, "pushed-out"))
        if arrival.verdict == "enter":
            return None
        if arrival.verdict == "refuse":
            return self._refusal(arrival.ticket, "line-full")
        return await self._wait(arrival.ticket)

    def leave(self, tenant: str = NO_TENANT) -> None:
        """One answered request of `tenant` gives its slot back; the waiter it goes to wakes."""
        granted = self.gate.leave(tenant)
        if granted is not None:
            self._resolve(granted, None)

    async def _wait(self, ticket: Ticket) -> Refusal | None:
        future: asyncio.Future[Refusal | None] = asyncio.get_running_loop().create_future()
        self._waiters[ticket] = future
        try:
            # asyncio.wait leaves the future alone on timeout or cancellation: whether it was
            # resolved is read from it below, after the waiting, in one step of the loop.
            await asyncio.wait((future,), timeout=self.max_wait_seconds)
        except asyncio.CancelledError:
            self._abandon(ticket, future)
            raise
        finally:
            del self._waiters[ticket]
            ADMISSION_WAIT_SECONDS.observe(time.monotonic() - ticket.arrived)
        if not future.done():
            self.gate.withdraw(ticket)
            return self._refusal(ticket, "waited")
        return future.result()

    def _refusal(self, ticket: Ticket, cause: Refused) -> Refusal:
        """The gate's refusal of `ticket`, counted by its cause."""
        ADMISSION_OVERLOADED.labels(cause).inc()
        return self.gate.refusal(ticket, cause)

    def _abandon(self, ticket: Ticket, future: asyncio.Future[Refusal | None]) -> None:
        """The waiter's caller went away (the apiserver hung up): out of the line, or, when the gate
        handed it a slot it will now never use, that slot to the next waiter."""
        if not future.done():
            self.gate.withdraw(ticket)
        elif future.result() is None:
            self.leave(ticket.tenant)

    def _resolve(self, ticket: Ticket, outcome: Refusal | None) -> None:
        self._waiters[ticket].set_result(outcome)
