"""What the Tenants' statuses say that the policies quote but OPA's inventory never holds: the
reconciler writes them (rbac.tenant_status), they change often and decide nothing alone, so the
webhook keeps them aside, by tenant, and adds each to the input of the requests that read it
(webhook.facts). A part of its own, not a base of the inventory: the inventory's Tenant watch tells
it of each Tenant seen (`remember_status`, handed to webhook.inventory.InventorySync by
webhook.replica), the fact gatherer reads it (webhook.facts.TenantStatusSource)."""

from __future__ import annotations

from labgate.core.api_resources import Object
from labgate.gpu_accounting.pool_capacity import PoolCapacityDocument
from webhook.admission import open_nodes, pool_gpus, queued_in_kueue, unscheduled_holds
from webhook.policy_input import HeldDocument, OpenNodesDocument, QueuedDocument


class TenantStatusFacts:
    """The last status of each Tenant seen, as the facts the policies read (webhook.admission)."""

    def __init__(self) -> None:
        self._held: dict[str, HeldDocument | None] = {}  # tenant -> webhook.admission.unscheduled_holds
        self._queued: dict[str, QueuedDocument | None] = {}  # tenant -> webhook.admission.queued_in_kueue
        self._pools: dict[str, PoolCapacityDocument | None] = {}  # tenant -> webhook.admission.pool_gpus
        self._open_nodes: dict[str, OpenNodesDocument | None] = {}  # tenant -> webhook.admission.open_nodes

    def remember_status(self, tenant: Object) -> None:
        """What the Tenant's status says of GPUs held by pods not yet scheduled (refusals quote it),
        of what Kueue holds queued (queue-wait quotes it), of what the nodes of its pools hold
        (gpu-quota's Fix, gpu-quota-node, placement-no-node) and of where a pod without tolerations
        can land (placement-no-untainted-node)."""
        name = str(tenant["metadata"]["name"])
        self._held[name] = unscheduled_holds(tenant)
        self._queued[name] = queued_in_kueue(tenant)
        self._pools[name] = pool_gpus(tenant)
        self._open_nodes[name] = open_nodes(tenant)

    def held_by_unscheduled(self, tenant: str) -> HeldDocument | None:
        """{"gpus", "pods"} held by the tenant's admitted pods not yet scheduled, as its status said."""
        return self._held.get(tenant)

    def queued_in_kueue(self, tenant: str) -> QueuedDocument | None:
        """{"workloads", "gpus"} Kueue holds queued of the tenant, as its status said (with Kueue)."""
        return self._queued.get(tenant)

    def pool_gpus(self, tenant: str) -> PoolCapacityDocument | None:
        """What the nodes of the tenant's pools hold per model, as its status said (pool_gpus)."""
        return self._pools.get(tenant)

    def open_nodes(self, tenant: str) -> OpenNodesDocument | None:
        """The cluster's nodes as a pod without tolerations sees them, as the tenant's status said."""
        return self._open_nodes.get(tenant)
