"""The measure of truth for GPU quotas: what the scheduler has bound on nodes.

Written from the Kubernetes rules alone, on purpose independent of labgate's code (no import of its
GPU demand arithmetic or ledger), so that a miscount in labgate cannot hide in the tests that check it.

A pod's effective request for a resource is what kube-scheduler's NodeResourcesFit counts
(k8s.io/component-helpers/resource.PodRequests): the sum over its containers and its restartable
init containers (native sidecars, restartPolicy Always), or, when larger, what an init container
needs while it runs (its own request plus the sidecars started before it). A container's request is
resources.requests[r], else resources.limits[r] (the apiserver defaults one to the other for
extended resources). A pod holds a node's GPUs from the moment it is bound (spec.nodeName) until it
terminates (phase Succeeded or Failed); a pod being deleted still holds them until it is gone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
MODEL_LABEL = "nvidia.com/gpu.product"
TENANT_LABEL = "labgate.io/tenant"
POOL_LABEL = "labgate.io/node-pool"
PREEMPTIBLE_CLASS = "research-preemptible"
TERMINATED = frozenset({"Succeeded", "Failed"})

Json = Mapping[str, Any]


def is_gpu_resource(resource: str) -> bool:
    return resource == GPU_RESOURCE or resource.startswith(MIG_PREFIX)


def _count(value: Any) -> int:
    # GPUs and MIG slices are extended resources: the apiserver admits whole numbers only.
    return int(str(value))


def _container_requests(container: Json) -> Counter[str]:
    resources = container.get("resources") or {}
    asked = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return Counter({r: _count(q) for r, q in asked.items() if is_gpu_resource(r)})


def _max(a: Counter[str], b: Counter[str]) -> Counter[str]:
    return Counter({r: max(a[r], b[r]) for r in set(a) | set(b)})


def effective_gpu_request(pod_spec: Json) -> Counter[str]:
    """Per GPU resource, what the scheduler reserves on a node for a pod with this spec."""
    total: Counter[str] = Counter()
    for container in pod_spec.get("containers") or []:
        total.update(_container_requests(container))
    sidecars: Counter[str] = Counter()
    init_peak: Counter[str] = Counter()
    for container in pod_spec.get("initContainers") or []:
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            total.update(requests)
            sidecars.update(requests)
            running = Counter(sidecars)
        else:
            running = Counter(requests)
            running.update(sidecars)
        init_peak = _max(init_peak, running)
    for resource, amount in (pod_spec.get("overhead") or {}).items():
        if is_gpu_resource(resource):
            total[resource] += _count(amount)
    return +_max(total, init_peak)


@dataclass
class TenantGpus:
    """A tenant's GPUs as the nodes see them: bound and not yet bound, in quota and preemptible
    (admitted beyond quota, priority class research-preemptible)."""

    bound_total: int = 0
    bound_by_model: Counter[str] = field(default_factory=Counter)
    preemptible_bound_total: int = 0
    pending_total: int = 0
    pending_preemptible_total: int = 0
    pods_bound: int = 0


def node_models(nodes: Iterable[Json]) -> dict[str, str]:
    """node name -> its GPU product label ("" when it has none)."""
    return {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(MODEL_LABEL, "") for n in nodes}


def is_preemptible(pod: Json) -> bool:
    """Runs at the preemptible priority class: beyond quota by design, first to be evicted."""
    return bool(pod["spec"].get("priorityClassName") == PREEMPTIBLE_CLASS)


def holds_gpus(pod: Json) -> bool:
    """Not terminated: a pod holds what it asked until it has succeeded or failed (or is gone)."""
    return (pod.get("status") or {}).get("phase") not in TERMINATED


def tenant_gpus(
    pods: Iterable[Json], *, namespace_tenants: Mapping[str, str], models: Mapping[str, str]
) -> dict[str, TenantGpus]:
    """Per tenant (by the namespace a pod lives in), the GPUs bound on nodes and those still pending."""
    result: dict[str, TenantGpus] = {}
    for pod in pods:
        tenant = namespace_tenants.get(pod["metadata"]["namespace"])
        if tenant is None or not holds_gpus(pod):
            continue
        asked = effective_gpu_request(pod["spec"])
        if not asked:
            continue
        gpus = result.setdefault(tenant, TenantGpus())
        node = pod["spec"].get("nodeName")
        if is_preemptible(pod):
            if node:
                gpus.preemptible_bound_total += sum(asked.values())
            else:
                gpus.pending_preemptible_total += sum(asked.values())
            continue
        if not node:
            gpus.pending_total += sum(asked.values())
            continue
        gpus.pods_bound += 1
        for resource, amount in asked.items():
            model = resource.removeprefix("nvidia.com/") if resource != GPU_RESOURCE else models.get(node, "")
            gpus.bound_total += amount
            gpus.bound_by_model[model] += amount
    return result


def quota_overshoot(gpus: TenantGpus, quota: Json) -> int:
    """How far a tenant's in-quota bound GPUs go beyond its spec.gpu (total and per model); 0 when within."""
    overshoot = 0
    total = quota.get("total")
    if total is not None:
        overshoot = max(overshoot, gpus.bound_total - int(total))
    listed = quota.get("models") or {}
    for model, amount in gpus.bound_by_model.items():
        # A tenant that lists models has none of the others.
        limit = int(listed[model]) if model in listed else (0 if listed else amount)
        overshoot = max(overshoot, amount - limit)
    return overshoot
