"""The tenant's GPU usage counted again from the API before a `gpu-quota` refusal stands.

A refusal at the quota's edge may be the count of a pod that is gone: the reconciler releases a
deleted pod's GPUs in the ledger a moment after the API finished the deletion. Before the webhook
refuses a pod for the quota, it reads the ledger afresh, lists the pods of the tenant's namespaces
and counts (`labgate.gpu_accounting.live_usage`); the request is decided again at that count, which
holds for that version of the ledger only (`GpuReservations.correct`). Only refusals pay for it,
bounded in time; a failure keeps the refusal.

Refusals that arrive together share one count that began after each of them (a count already under
way may have listed the pods before their deletion finished, so it is waited for, not joined).

A count still refusing only because of reservations of pods the list lacks (`Recount.unlisted`) may
be counting a pod created and deleted before the reconciler settled it, which the API cannot tell
from a pod not created yet. The reconciler, which saw the pod go, releases such a reservation at
once; `recount_after_release` waits for the ledger to change (this replica's watch-fed copy) and
counts again, all within the first count's bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from labgate.core.api_resources import POD
from labgate.core.coalesce import Coalescer
from labgate.core.gpu_amount import GpuAmount
from labgate.core.kube import KubeApi
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.ledger import Ledger
from labgate.gpu_accounting.live_usage import count_live

log = logging.getLogger(__name__)

# The whole count (the ledger read and one list per namespace) is bounded by this, and so are the
# counts after it that wait for a release (`recount_after_release`).
RECOUNT_SECONDS = 1.0
# How often the ledger's watch-fed copy is looked at while waiting for a release (a dict read).
RELEASE_POLL_SECONDS = 0.02


@dataclass(frozen=True)
class Recount:
    """A count: the ledger as read, the usage at it, the part of it that is reservations of pods
    the API did not list, and (event-loop time) when the counts for this refusal must end."""

    ledger: Ledger
    usage: GpuAmount
    unlisted: GpuAmount
    deadline: float = 0.0


class UsageRecount:
    """Counts a tenant's GPU usage from its live pods and its ledger, read from the API."""

    def __init__(
        self,
        kube: KubeApi,
        fresh_ledger: Callable[[str], Ledger],
        namespaces_of: Callable[[str], Iterable[str]],
        counting: GpuCounting,
        *,
        cached_ledger: Callable[[str], Ledger] | None = None,
        timeout: float = RECOUNT_SECONDS,
    ):
        """`cached_ledger`: this replica's watch-fed copy of a tenant's ledger (without it, no count
        waits for a release)."""
        self._kube = kube
        self._fresh_ledger = fresh_ledger
        self._cached_ledger = cached_ledger
        self._namespaces_of = namespaces_of
        self._counting = counting
        self._timeout = timeout
        self._flights: Coalescer[str, Recount | None] = Coalescer()

    def count(self, tenant: str) -> Recount | None:
        """The ledger as read and the usage at it; None when the pods cannot be counted (DRA claims).
        The ledger is read before the pods are listed: see labgate.gpu_accounting.live_usage."""
        ledger = self._fresh_ledger(tenant)
        # Page by page: a tenant of 10,000 pods is not held in memory at once.
        pods = (
            pod
            for namespace in sorted(set(self._namespaces_of(tenant)))
            for page in self._kube.pages(POD, namespace=namespace, timeout=self._timeout)
            for pod in page.get("items") or []
        )
        counted = count_live(ledger, pods, self._counting)
        return None if counted is None else Recount(ledger, counted.usage, counted.unlisted)

    async def recount(self, tenant: str) -> Recount | None:
        """A count that began after this call; None when there is none in time (the refusal stands).
        A count under way that ends in error is waited for all the same, then one is begun."""
        deadline = asyncio.get_running_loop().time() + self._timeout
        return await self._count_by(tenant, deadline)

    async def recount_after_release(self, earlier: Recount) -> Recount | None:
        """A count begun once the ledger changed from `earlier`'s version (the reconciler's release
        of a pod that is gone, or any other write), within `earlier`'s deadline; None when it did not
        change in time (the refusal stands)."""
        if self._cached_ledger is None:
            return None
        loop, tenant = asyncio.get_running_loop(), earlier.ledger.tenant
        try:
            while self._cached_ledger(tenant).resource_version == earlier.ledger.resource_version:
                if loop.time() + RELEASE_POLL_SECONDS >= earlier.deadline:
                    return None
                await asyncio.sleep(RELEASE_POLL_SECONDS)  # bounded by the deadline
        except Exception:  # an unreadable ledger: the refusal stands
            log.warning("could not read the GPU ledger of tenant %s", tenant, exc_info=True)
            return None
        return await self._count_by(tenant, earlier.deadline)

    async def _count_by(self, tenant: str, deadline: float) -> Recount | None:
        loop = asyncio.get_running_loop()
        try:
            under_way = self._flights.running(tenant)
            if under_way is not None:  # its outcome is not ours
                await asyncio.wait({under_way}, timeout=max(deadline - loop.time(), 0.0))
            counted = await asyncio.wait_for(
                self._flights.run(tenant, lambda: asyncio.to_thread(self.count, tenant)),
                timeout=max(deadline - loop.time(), 0.0),
            )
        except Exception:  # the count is a second look only: without it the refusal stands
            log.warning("could not count the GPU usage of tenant %s from the API", tenant, exc_info=True)
            return None
        # A shared count carries this refusal's own deadline.
        return None if counted is None else replace(counted, deadline=deadline)
