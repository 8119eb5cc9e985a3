"""What the caches say of a request's tenant, added to its policy input without any I/O: its GPU
usage (the ledger sums), what its status says (GPUs held by pods not yet scheduled, queued in Kueue,
its pools' capacity, the nodes open to pods without tolerations), and what its live pods ask of
CPU, memory and pod slots (tenant-quota).

The fact gatherer (webhook/facts.py) hands every request here after its own reads; the sources are
given (the Protocols below): this room imports no door.
"""

from __future__ import annotations

import logging
from typing import Protocol

from labgate.core.gpu_amount import GpuAmount
from labgate.gpu_accounting.ledger import Ledger
from labgate.gpu_accounting.pool_capacity import PoolCapacityDocument
from webhook.policy_input import HeldDocument, OpenNodesDocument, PolicyInput, QueuedDocument
from webhook.request_class import RequestClass
from webhook.review import AdmissionRequest

log = logging.getLogger(__name__)


class TenantStatusSource(Protocol):
    """What the Tenants' statuses say that the policies quote, kept aside from the inventory
    (webhook.tenant_status_facts.TenantStatusFacts); each None until a status says it."""

    def held_by_unscheduled(self, tenant: str) -> HeldDocument | None: ...

    def queued_in_kueue(self, tenant: str) -> QueuedDocument | None: ...

    def pool_gpus(self, tenant: str) -> PoolCapacityDocument | None: ...

    def open_nodes(self, tenant: str) -> OpenNodesDocument | None: ...


class GpuUsageSource(Protocol):
    """A tenant's GPU usage (webhook.ledger_sums.LedgerSums, shared with the reservations)."""

    def usage_of(self, tenant: str, *, excluding: str | None = None) -> GpuAmount: ...


class WorkloadUsageSource(Protocol):
    """What a tenant's live pods ask of CPU, memory and pod slots (TenantRequests, from the cached
    ledger the reconciler keeps current)."""

    def workloads_of(self, tenant: str) -> dict[str, int]: ...


class CachedLedgers(Protocol):
    """The tenants' cached ledgers (labgate.gpu_accounting.ledger_store.LedgerCache)."""

    def cached(self, tenant: str) -> Ledger: ...


class TenantRequests:
    """What each tenant's live pods ask of CPU, memory and pod slots (tenant-quota), as the
    reconciler last wrote it into the tenant's cached ledger: read, never reserved (no I/O)."""

    def __init__(self, ledgers: CachedLedgers):
        self.ledgers = ledgers

    def workloads_of(self, tenant: str) -> dict[str, int]:
        return self.ledgers.cached(tenant).workloads


class TenantFacts:
    """The tenant's facts from the caches (`gpu_usage`, `tenant_status`, `workload_usage`: None
    leaves that fact out)."""

    def __init__(
        self,
        *,
        gpu_usage: GpuUsageSource | None = None,
        tenant_status: TenantStatusSource | None = None,
        workload_usage: WorkloadUsageSource | None = None,
    ):
        self.gpu_usage = gpu_usage
        self.tenant_status = tenant_status
        self.workload_usage = workload_usage

    def add(
        self,
        request: AdmissionRequest,
        request_class: RequestClass,
        policy_input: PolicyInput,
        tenant: str | None,
    ) -> None:
        """Every fact the caches hold of `tenant` that this request's policies read."""
        self._add_gpu_usage(request, request_class, policy_input, tenant)
        self._add_open_nodes(request, policy_input, tenant)
        if tenant and self.workload_usage is not None and request_class.is_pod_create:
            # tenant-quota: the tenant's live pods' CPU, memory and pods, from the same cached ledger
            # (no round trip); nothing when it has none.
            self._add_tenant_usage(policy_input, self.workload_usage.workloads_of(tenant))

    def _add_gpu_usage(
        self,
        request: AdmissionRequest,
        request_class: RequestClass,
        policy_input: PolicyInput,
        tenant: str | None,
    ) -> None:
        """The tenant's GPU usage, where the policies read it (from the cached ledger: no I/O)."""
        if self.gpu_usage is None:
            return
        if tenant and request_class.needs_gpu_usage:
            # Both webhooks see the tenant's GPU usage: the mutation marks pods beyond quota
            # preemptible (when the tenant allows it); the validation decides and reserves, and warns
            # at apply time about a workload's pods that will wait for GPUs.
            # A pod reserved before (a gate removal retried after its first try failed) is not
            # counted twice: its reservation is replaced.
            excluding = request_class.reservation_key if request_class.takes_gpus_now else None
            policy_input["gpu_usage"] = self.gpu_usage.usage_of(tenant, excluding=excluding).to_document()
            if self.tenant_status is not None:
                self._add_tenant_status(policy_input, self.tenant_status, tenant)
        if request_class.is_tenant_update and request.name:
            try:  # only for a warning: a ledger that does not parse must not stop the infra team's change
                policy_input["gpu_usage"] = self.gpu_usage.usage_of(request.name).to_document()
            except Exception:
                log.exception("no GPU usage of tenant %s for its update", request.name)

    @staticmethod
    def _add_tenant_status(policy_input: PolicyInput, status: TenantStatusSource, tenant: str) -> None:
        """What the tenant's status says of its GPUs, where the policies read it (no I/O)."""
        held = status.held_by_unscheduled(tenant)
        if held is not None:  # quoted by a refusal: "8 held by 1 pod not yet scheduled: ..."
            policy_input["gpu_held"] = held
        queued = status.queued_in_kueue(tenant)
        if queued is not None:  # quoted by queue-wait: "queued ahead: 1 workload asking 32 GPUs"
            policy_input["gpu_queued"] = queued
        pools = status.pool_gpus(tenant)
        if pools is not None:  # gpu-quota-node refuses by it; a refusal's Fix names the largest node
            policy_input["gpu_pools"] = pools

    def _add_open_nodes(
        self, request: AdmissionRequest, policy_input: PolicyInput, tenant: str | None
    ) -> None:
        """On a CREATE of pod templates in a tenant namespace, the nodes a pod without tolerations can
        land on, as the tenant's status said (placement-no-untainted-node; no I/O); nothing before
        the status says it."""
        if not tenant or request.operation != "CREATE" or not policy_input["pod_templates"]:
            return
        if self.tenant_status is None:
            return
        nodes = self.tenant_status.open_nodes(tenant)
        if nodes is not None:
            policy_input["open_nodes"] = nodes

    @staticmethod
    def _add_tenant_usage(policy_input: PolicyInput, workloads: dict[str, int]) -> None:
        if workloads:
            policy_input["tenant_usage"] = workloads
