"""A tenant's Kueue queues as plain manifests (pure): flavors, a ClusterQueue and LocalQueues.

A tenant's Kueue queues, as plain manifests (pure: no API calls), for a cluster where Kueue runs
beside labgate (reconcile --kueue; chart kueue.enabled).

- One ResourceFlavor per node pool named in any Tenant's spec.placement.nodePools, named as the pool:
  its nodeSelector as the flavor's nodeLabels, its tolerations as the flavor's (Kueue adds both to the
  pods it admits on that flavor). Flavors are shared by the tenants that name the same pool, so that
  tenants in one cohort borrow each other's idle quota of it; one flavor without labels stands for
  "any node" for tenants without pools. A flavor goes when no Tenant names its pool any more.
- One ClusterQueue per tenant, named as the tenant, for the namespaces that carry its label: one
  resource group of GPUs, CPU and memory over its flavors, spot pools first, then (where the Tenant
  allows on-demand capacity, or has no spot pool) the others. A flavor's GPU quota is the tenant's quota
  of the pool's GPU model (spec.gpu.models, the model its nodeSelector names under the configured
  gpu_model_label) or its total (spec.gpu.total), less what its pods hold outside Kueue
  (rbac/outside_queue.py): the total less all of it, a model's quota less what is of that model; never
  below 0.
- A second resource group caps the sum over those flavors: Kueue has no limit across the flavors of
  one group, so two pools of a total of 16 would admit 16 on each. Kueue's resource transformation
  (its Configuration, `gpu_total_transformation()`) makes every nvidia.com/gpu a workload asks also
  ask one GPU_TOTAL_RESOURCE, which only this group covers, over one flavor without node labels
  (TOTAL_FLAVOR) whose quota is the total less what pods hold outside Kueue: a workload must fit both
  groups. Every ClusterQueue has it (no limit where the Tenant sets no total), since Kueue refuses a
  workload asking a resource its queue does not cover.
- In a cohort (spec.queue.cohort): a tenant whose pods beyond quota are preemptible
  (spec.gpu.overQuota: preemptible) borrows idle quota (up to spec.queue.borrowingLimit), one that
  refuses them borrows none; lendingLimit caps what it lends. Preemption reclaims only what others
  borrowed (reclaimWithinCohort: Any, borrowWithinCohort: Never): another tenant's workload within its
  own quota is never preempted for it.
- A LocalQueue named `default` in each of the tenant's namespaces, so that Kueue gives Jobs without a
  queue name that queue (its LocalQueueDefaulting).
"""

from __future__ import annotations

from typing import Any

from labgate.core.tenant import MANAGED_BY, MANAGED_BY_LABEL, TENANT_LABEL, NodePool, Tenant
from labgate.gpu_accounting.demand import quantity
from rbac.outside_queue import NOTHING_HELD, HeldOutsideQueue

Manifest = dict[str, Any]

KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
DEFAULT_LOCAL_QUEUE = "default"
# The flavor of tenants without node pools: no node labels, any node.
ANY_NODE_FLAVOR = "labgate-any-node"
# The flavor of every ClusterQueue's tenant-wide GPU cap (no node labels: it places nothing).
TOTAL_FLAVOR = "labgate-tenant-total"
# What Kueue's resource transformation adds, one per nvidia.com/gpu asked: the tenant-wide count.
GPU_TOTAL_RESOURCE = "labgate.io/gpu-total"
# Marks the flavors labgate keeps (shared by tenants, so not labelled with one).
FLAVOR_LABEL = "labgate.io/flavor"
GPU_RESOURCE = "nvidia.com/gpu"
# The default of GpuCounting.gpu_model_label (the policy config's): the label naming a node's model.
GPU_MODEL_LABEL = "nvidia.com/gpu.product"
# What "no limit" is in a quota Kueue needs a number for.
UNLIMITED_GPUS = 100_000
DEFAULT_CPU = "100000"
DEFAULT_MEMORY = "10000Ti"


def queue_pools(tenant: Tenant) -> list[NodePool]:
    """The pools the tenant's queue admits to, in Kueue's order of trying: spot pools first, then the
    others where the Tenant allows on-demand capacity (or has no spot pool at all)."""
    pools = tenant.spec.placement.node_pools
    spot = [p for p in pools if p.spot]
    on_demand = [p for p in pools if not p.spot]
    return spot + (on_demand if tenant.spec.placement.allow_on_demand or not spot else [])


def flavor_name(pool: NodePool | None) -> str:
    return ANY_NODE_FLAVOR if pool is None else pool.name


def _flavor_manifest(name: str, spec: dict[str, Any]) -> Manifest:
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": name, "labels": {MANAGED_BY_LABEL: MANAGED_BY, FLAVOR_LABEL: "true"}},
        "spec": spec,
    }


def resource_flavor(pool: NodePool | None) -> Manifest:
    """The flavor of `pool` (None: the flavor of any node)."""
    spec: dict[str, Any] = {}
    if pool is not None and pool.node_selector:
        spec["nodeLabels"] = dict(sorted(pool.node_selector.items()))
    if pool is not None and pool.tolerations:
        spec["tolerations"] = [t.manifest() for t in pool.tolerations]
    return _flavor_manifest(flavor_name(pool), spec)


def total_flavor() -> Manifest:
    """The flavor of the tenant-wide cap: no node labels, no tolerations, so it adds nothing to the
    pods Kueue admits (their pool's flavor places them)."""
    return _flavor_manifest(TOTAL_FLAVOR, {})


def gpu_total_transformation() -> Manifest:
    """The entry Kueue's Configuration needs in `resources.transformations` for the cap across
    flavors: each nvidia.com/gpu a pod asks also asks one GPU_TOTAL_RESOURCE (Retain: the GPUs are
    still assigned to the pool's flavor)."""
    return {"input": GPU_RESOURCE, "strategy": "Retain", "outputs": {GPU_TOTAL_RESOURCE: "1"}}


def shared_flavors(tenants: list[Tenant]) -> list[Manifest]:
    """The flavors every live tenant's queue needs, once each: its pools' (a pool named by several
    tenants is described by the first of them by name: they name the same nodes) and, while any
    tenant lives, the total's."""
    pools: dict[str, NodePool | None] = {}
    for tenant in sorted(tenants, key=lambda t: t.name):
        if tenant.is_deleting:
            continue
        own: list[NodePool | None] = [*queue_pools(tenant)] or [None]
        for pool in own:
            pools.setdefault(flavor_name(pool), pool)
    flavors = [resource_flavor(pools[name]) for name in sorted(pools)]
    return [*flavors, total_flavor()] if flavors else []


def gpu_quota(
    tenant: Tenant,
    pool: NodePool | None,
    held: HeldOutsideQueue = NOTHING_HELD,
    *,
    model_label: str = GPU_MODEL_LABEL,
) -> int:
    """The GPUs Kueue may admit on `pool`'s flavor (None: over all flavors, the total's): each limit
    that applies (the total, the model's that the pool's `model_label` selects) less what `held` takes
    of it, the least of them, never below 0."""
    quota = tenant.spec.gpu
    limits = [] if quota.total is None else [quota.total - held.total]
    model = None if pool is None else pool.node_selector.get(model_label)
    if model is not None and model in quota.models:
        limits.append(quota.models[model] - held.of_model(model))
    return max(0, min(limits, default=UNLIMITED_GPUS))


def _borrowing(tenant: Tenant) -> dict[str, str]:
    """A GPU resource's borrowing and lending limits in the tenant's cohort (none outside one)."""
    queue = tenant.spec.queue
    limits: dict[str, str] = {}
    if queue.cohort is None:
        return limits
    if tenant.spec.gpu.over_quota == "refuse":
        limits["borrowingLimit"] = "0"
    elif queue.borrowing_limit is not None:
        limits["borrowingLimit"] = str(queue.borrowing_limit)
    if queue.lending_limit is not None:
        limits["lendingLimit"] = str(queue.lending_limit)
    return limits


def _flavor_quotas(tenant: Tenant, pool: NodePool | None, gpus: int) -> Manifest:
    queue = tenant.spec.queue
    return {
        "name": flavor_name(pool),
        "resources": [
            {"name": GPU_RESOURCE, "nominalQuota": str(gpus), **_borrowing(tenant)},
            {"name": "cpu", "nominalQuota": queue.cpu or DEFAULT_CPU},
            {"name": "memory", "nominalQuota": queue.memory or DEFAULT_MEMORY},
        ],
    }


def _total_group(tenant: Tenant, held: HeldOutsideQueue) -> Manifest:
    """The group of the cap across flavors: the total (less what is held outside Kueue), borrowed and
    lent in a cohort as the GPUs are."""
    total = {"name": GPU_TOTAL_RESOURCE, "nominalQuota": str(gpu_quota(tenant, None, held))}
    return {
        "coveredResources": [GPU_TOTAL_RESOURCE],
        "flavors": [{"name": TOTAL_FLAVOR, "resources": [total | _borrowing(tenant)]}],
    }


def cluster_queue(
    tenant: Tenant, held: HeldOutsideQueue = NOTHING_HELD, *, model_label: str = GPU_MODEL_LABEL
) -> Manifest:
    """The tenant's ClusterQueue (named as the tenant); `held`: what its pods hold outside Kueue;
    `model_label`: the node label naming a pool's GPU model (GpuCounting.gpu_model_label)."""
    pools: list[NodePool | None] = [*queue_pools(tenant)] or [None]
    flavors = [
        _flavor_quotas(tenant, pool, gpu_quota(tenant, pool, held, model_label=model_label)) for pool in pools
    ]
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {TENANT_LABEL: tenant.name}},
        "queueingStrategy": "BestEffortFIFO",
        "resourceGroups": [
            {"coveredResources": [GPU_RESOURCE, "cpu", "memory"], "flavors": flavors},
            _total_group(tenant, held),
        ],
        "preemption": {
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "Never"},
            "withinClusterQueue": "LowerPriority",
        },
    }
    if tenant.spec.queue.cohort is not None:
        spec["cohortName"] = tenant.spec.queue.cohort
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {
            "name": tenant.name,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, TENANT_LABEL: tenant.name},
        },
        "spec": spec,
    }


def local_queue(tenant: Tenant, namespace: str) -> Manifest:
    """The queue Jobs in `namespace` go to when they name none."""
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "LocalQueue",
        "metadata": {
            "name": DEFAULT_LOCAL_QUEUE,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, TENANT_LABEL: tenant.name},
        },
        "spec": {"clusterQueue": tenant.name},
    }


def tenant_queues(
    tenant: Tenant,
    *,
    namespaces: list[str],
    held: HeldOutsideQueue = NOTHING_HELD,
    model_label: str = GPU_MODEL_LABEL,
) -> list[Manifest]:
    """The tenant's ClusterQueue and a default LocalQueue in each of its namespaces."""
    queue = cluster_queue(tenant, held, model_label=model_label)
    return [queue, *(local_queue(tenant, ns) for ns in namespaces)]


def workload_gpus(workload: Manifest) -> int:
    """GPUs a Kueue Workload asks: each pod set's count times its pod's GPU requests (or limits)."""
    total = 0.0
    for pod_set in workload.get("spec", {}).get("podSets") or []:
        spec = pod_set.get("template", {}).get("spec", {})
        per_pod = 0.0
        for container in spec.get("containers") or []:
            resources = container.get("resources") or {}
            amount = (resources.get("requests") or {}).get(GPU_RESOURCE) or (
                resources.get("limits") or {}
            ).get(GPU_RESOURCE)
            per_pod += float(quantity(amount)) if amount is not None else 0.0
        total += per_pod * int(pod_set.get("count", 1))
    return int(total)


def is_admitted(workload: Manifest) -> bool:
    """Kueue reserved quota for the workload (it runs, or is about to)."""
    conditions = workload.get("status", {}).get("conditions") or []
    return any(c.get("type") == "QuotaReserved" and c.get("status") == "True" for c in conditions)


def is_finished(workload: Manifest) -> bool:
    conditions = workload.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Finished" and c.get("status") == "True" for c in conditions)


def queued(workloads: list[Manifest]) -> tuple[int, int]:
    """(workloads waiting for quota, the GPUs they ask) among `workloads`."""
    waiting = [w for w in workloads if not is_admitted(w) and not is_finished(w)]
    return len(waiting), sum(workload_gpus(w) for w in waiting)
