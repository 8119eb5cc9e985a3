"""The tenant's GPU usage counted again from the API before a `gpu-quota` refusal stands.

A refusal at the quota's edge may be the count of a pod that is gone: the reconciler releases a
deleted pod's GPUs in the ledger a moment after the API finished the deletion. Before the webhook
refuses a pod for the quota, it reads the ledger afresh, lists the pods of the tenant's namespaces
and counts (`labgate.gpu_accounting.live_usage`); the request is decided again at that count, which
holds for that version of the ledger only (`GpuReservations.correct`). Only refusals pay for it,
bounded in time; a failure keeps the refusal.

Refusals that arrive together share one count that began after each of them (a count already under
way may have listed the pods before their deletion finished, so it is waited for, not joined).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from labgate.core.api_resources import POD
from labgate.core.coalesce import Coalescer
from labgate.core.gpu_amount import GpuAmount
from labgate.core.kube import KubeApi
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.ledger import Ledger
from labgate.gpu_accounting.live_usage import live_usage

log = logging.getLogger("labgate.webhook")

# The whole count (the ledger read and one list per namespace) is bounded by this.
RECOUNT_SECONDS = 1.0

Recount = tuple[Ledger, GpuAmount]


class UsageRecount:
    """Counts a tenant's GPU usage from its live pods and its ledger, read from the API."""

    def __init__(
        self,
        kube: KubeApi,
        fresh_ledger: Callable[[str], Ledger],
        namespaces_of: Callable[[str], Iterable[str]],
        counting: GpuCounting,
        *,
        timeout: float = RECOUNT_SECONDS,
    ):
        self._kube = kube
        self._fresh_ledger = fresh_ledger
        self._namespaces_of = namespaces_of
        self._counting = counting
        self._timeout = timeout
        self._flights: Coalescer[str, Recount | None] = Coalescer()

    def count(self, tenant: str) -> Recount | None:
        """The ledger as read and the usage at it; None when the pods cannot be counted (DRA claims).
        The ledger is read before the pods are listed: see labgate.gpu_accounting.live_usage."""
        ledger = self._fresh_ledger(tenant)
        pods = [
            pod
            for namespace in sorted(set(self._namespaces_of(tenant)))
            for pod in self._kube.list(POD, namespace=namespace, timeout=self._timeout).get("items") or []
        ]
        usage = live_usage(ledger, pods, self._counting)
        return None if usage is None else (ledger, usage)

    async def recount(self, tenant: str) -> Recount | None:
        """A count that began after this call; None when there is none in time (the refusal stands).
        A count under way that ends in error is waited for all the same, then one is begun."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._timeout
        try:
            under_way = self._flights.running(tenant)
            if under_way is not None:
                await asyncio.wait({under_way}, timeout=self._timeout)  # its outcome is not ours
            return await asyncio.wait_for(
                self._flights.run(tenant, lambda: asyncio.to_thread(self.count, tenant)),
                timeout=max(deadline - loop.time(), 0.0),
            )
        except Exception:  # the count is a second look only: without it the refusal stands
            log.warning("could not count the GPU usage of tenant %s from the API", tenant, exc_info=True)
            return None
