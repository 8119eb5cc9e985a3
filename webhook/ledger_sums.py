"""What each tenant's ledger sums to: its GPU usage and the stored size of its reservations, summed
once per version of the ledger (not once per request), and the usage counted from the live pods
where the ledger still counts pods that are gone (`correct`, from webhook.usage_recount).

Usages are `GpuAmount`s (hashable: the decisions known per usage are keyed by them): the facts room
puts the usage into the policy input, the reservations' batches decide against it.

A sum is known for the very ledger object it was summed from (a candidate ledger of a batch shares
its version with the ledger it extends, so the version alone would not do), and that object is held
by a weak reference: once the cache moves on to a newer version, the old one (after a burst, a
ledger of thousands of reservations long released) is freed rather than kept for the tenant's next
request.
"""

from __future__ import annotations

import weakref
from typing import Protocol

from labgate.core.gpu_amount import GpuAmount
from labgate.gpu_accounting.ledger import Ledger, stored_size, usage


class LedgerAccess(Protocol):
    """The ledgers (labgate.gpu_accounting.ledger_store.LedgerCache): the cached copy, and the
    compare-and-swap and re-read, which run in the ledger's own threads."""

    @property
    def is_synced(self) -> bool: ...

    def cached(self, tenant: str) -> Ledger: ...

    async def fresh_async(self, tenant: str) -> Ledger: ...

    async def write_async(self, ledger: Ledger) -> Ledger: ...


class LedgerSums:
    """The sums of the tenants' ledgers as this replica last knew them."""

    def __init__(self, ledgers: LedgerAccess):
        self.ledgers = ledgers
        self._usage: dict[str, tuple[weakref.ref[Ledger], GpuAmount]] = {}
        self._size: dict[str, tuple[weakref.ref[Ledger], int]] = {}
        # tenant -> (ledger version, usage counted from the live pods at it): see `correct`.
        self._counted: dict[str, tuple[str, GpuAmount]] = {}

    def usage_of(self, tenant: str, *, excluding: str | None = None) -> GpuAmount:
        """The tenant's GPU usage from the cached ledger, less the reservation `excluding` holds."""
        return self.usage(self.ledgers.cached(tenant), excluding)

    def usage(self, ledger: Ledger, excluding: str | None = None) -> GpuAmount:
        """The ledger's usage (the live count where one was made at its version), less the
        reservation `excluding` holds."""
        memo = self._usage.get(ledger.tenant)
        if memo is None or memo[0]() is not ledger:
            counted = self._counted.get(ledger.tenant)
            at_version = counted is not None and counted[0] == ledger.resource_version
            memo = (weakref.ref(ledger), counted[1] if counted is not None and at_version else usage(ledger))
            self._usage[ledger.tenant] = memo
        held = ledger.reservations.get(excluding) if excluding is not None else None
        return memo[1] if held is None else memo[1] - held.gpus

    def size(self, ledger: Ledger) -> int:
        """The stored size of the ledger's reservations."""
        memo = self._size.get(ledger.tenant)
        if memo is None or memo[0]() is not ledger:
            memo = (weakref.ref(ledger), stored_size(ledger))
            self._size[ledger.tenant] = memo
        return memo[1]

    def written(self, ledger: Ledger, *, at: GpuAmount, size: int) -> None:
        """A ledger this replica wrote, whose sums its batch already knows."""
        self._usage[ledger.tenant] = (weakref.ref(ledger), at)
        self._size[ledger.tenant] = (weakref.ref(ledger), size)

    def correct(self, ledger: Ledger, counted: GpuAmount) -> None:
        """Decide against `counted` wherever `ledger`'s version is decided against: the usage counted
        from the live pods right after that version was read (webhook.usage_recount), when the
        ledger still counts pods that are gone. A later version (the reconciler's release, another
        reservation) is summed as usual; a reservation against this one is a compare-and-swap on it,
        which fails if the ledger changed since."""
        if ledger.resource_version is not None:
            self._counted[ledger.tenant] = (ledger.resource_version, counted)
            self._usage.pop(ledger.tenant, None)
