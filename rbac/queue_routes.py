"""Who hears of what Kueue-related changes (with reconcile --kueue): a Workload asks for its tenant's
status; a ResourceFlavor (shared) for one tenant's pass, which restores every flavor; and a tenant's
settlement (paced, see rbac.reconciler.Pacing), or a change to a node's GPUs or labels for every
tenant, asks for the tenant's provisioning only when what its pods hold outside Kueue changed since
its ClusterQueue was written (rbac/queue_holdings.py): a pod event never costs a pass by itself.
"""

from __future__ import annotations

from labgate.core.api_resources import WORKLOAD, Kind, Object
from labgate.core.tenant import TENANT_LABEL
from rbac.runtime import ObjectCache, labels
from rbac.tenant_controller import TenantController, TenantStatusController


class QueueRoutes:
    """Routes Kueue's objects, settlements and node changes to the tenant and status controllers."""

    def __init__(self, cache: ObjectCache, tenants: TenantController, status: TenantStatusController):
        self._cache = cache
        self._tenants = tenants
        self._status = status

    def on_kueue_object(self, kind: Kind, obj: Object) -> None:
        """A Workload changes its namespace's tenant's status; a flavor is shared, and any tenant's
        pass restores every flavor (the first tenant's is asked for)."""
        if kind is WORKLOAD:
            namespace = self._cache.get(("v1", "Namespace", "", str(obj["metadata"].get("namespace"))))
            if namespace is not None and (tenant := labels(namespace).get(TENANT_LABEL)):
                self._status.queue.add(tenant)
            return
        tenants = self._tenant_names()
        if tenants:
            self._tenants.queue.add(tenants[0])

    def on_settled(self, tenant: str) -> None:
        """After a settlement of `tenant`: its status, and its provisioning if its queue is stale."""
        self._status.queue.add(tenant)
        if self._tenants.kueue and self._tenants.is_queue_stale(tenant):
            self._tenants.queue.add(tenant)

    def on_nodes_changed(self) -> None:
        """A node's GPUs or labels changed: every tenant's status, and the provisioning of those
        whose pods' holdings outside Kueue it changed (their model is their node's)."""
        self._status.enqueue_all()
        if self._tenants.kueue:
            for tenant in self._tenant_names():
                if self._tenants.is_queue_stale(tenant):
                    self._tenants.queue.add(tenant)

    def _tenant_names(self) -> list[str]:
        return sorted(k[3] for k, _ in self._cache.select(lambda k, _: k[1] == "Tenant"))
