"""What each tenant's pods hold outside Kueue, gathered from the reconciler's caches (its pods and
their claims' allocations, the GPU nodes, Kueue's Workloads) for the tenant's ClusterQueue; the
arithmetic is rbac/outside_queue.py.

Only with Kueue (reconcile --kueue): the Workloads are cached then. A tenant whose live pods hold no
GPUs costs no look at the Workloads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from labgate.gpu_accounting.claim_allocations import AllocatedDevices
from rbac.node_index import NodeIndex
from rbac.outside_queue import (
    NOTHING_HELD,
    HeldOutsideQueue,
    held_outside_queue,
    live_gpu_pods,
    workload_owner_uids,
)
from rbac.runtime import ObjectCache
from rbac.settlement_controller import PodIndex, labelled_namespaces


class QueueHoldings:
    """`of(tenant)`: what the tenant's pods hold that Kueue did not admit, from the caches now."""

    def __init__(
        self,
        cache: ObjectCache,
        pods: PodIndex,
        nodes: NodeIndex,
        allocations: Callable[[], Mapping[str, tuple[AllocatedDevices, ...]]],
    ):
        """`allocations()`: the devices allocated to each pod's claims (the settlement's ClaimIndex)."""
        self._cache = cache
        self._pods = pods
        self._nodes = nodes
        self._allocations = allocations

    def of(self, tenant: str) -> HeldOutsideQueue:
        namespaces = labelled_namespaces(self._cache, tenant)
        allocations = self._allocations()
        pods = live_gpu_pods(self._pods.in_namespaces(namespaces), allocations)
        if not pods:
            return NOTHING_HELD
        workloads = self._cache.select(lambda k, _: k[1] == "Workload" and k[2] in namespaces)
        return held_outside_queue(
            pods,
            workload_owners=workload_owner_uids(o for _, o in workloads),
            node_models=self._nodes.node_models(),
            allocations=allocations,
        )
