"""The policies' queue configuration (policies/labgate/config/queue/data.json) as the reconciler reads
it (pure).

The admission policies read the same file (lib.kueue), so the reconciler and the policies agree on
which tenants Kueue manages and whether Kueue's pod integration gates their pods: the chart mounts
it into both, and `labgate reconcile --queue-config` names it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from labgate.core.tenant import Tenant


class QueueConfig(BaseModel):
    """What the policies know of Kueue (lib.kueue): our own configuration, so unknown keys are refused."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    managed_by_kueue: bool = False
    """Kueue runs beside labgate and manages every tenant (else only Tenants that set spec.queue)."""
    default_local_queue: str = "default"
    """The LocalQueue labgate provisions in each namespace of a managed tenant."""
    kueue_users: list[str] = Field(default_factory=list)
    """The user names Kueue's controller writes as."""
    pod_integration: bool = False
    """Kueue's pod integration is on: a managed tenant's GPU pods wait behind Kueue's gate."""

    def is_managed(self, tenant: Tenant) -> bool:
        """Kueue manages `tenant` (lib.kueue.managed_tenant): every tenant, or one whose Tenant sets
        spec.queue (even {})."""
        return self.managed_by_kueue or tenant.spec.has_queue

    def gates_gpu_pods(self, tenant: Tenant) -> bool:
        """Every GPU pod of `tenant` waits behind Kueue's scheduling gate until Kueue admits it (the
        policies' mutation gates it, lib.kueue.is_queued): Kueue manages the tenant and its pod
        integration is on."""
        return self.pod_integration and self.is_managed(tenant)
