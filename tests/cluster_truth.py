"""The measure of truth for GPU quotas and tenant limits: what the scheduler has bound on nodes.

Written from the Kubernetes rules alone, on purpose independent of labgate's code (no import of its
GPU demand arithmetic, request counting or ledger), so that a miscount in labgate cannot hide in the
tests that check it.

A pod's effective request for a resource is what kube-scheduler's NodeResourcesFit counts
(k8s.io/component-helpers/resource.PodRequests): the sum over its containers and its restartable
init containers (native sidecars, restartPolicy Always), or, when larger, what an init container
needs while it runs (its own request plus the sidecars started before it); plus spec.overhead. A
container's request is resources.requests[r], else resources.limits[r] (the apiserver defaults one
to the other). Kubernetes 1.34 serves pod-level resources (PodLevelResources, beta, on by default):
for cpu and memory, a pod's spec.resources.requests[r] replaces what its containers ask, and a
pod-level limit without a request is defaulted into the request when no container names r. GPUs
cannot be set at pod level (the apiserver refuses any resource but cpu, memory and hugepages in
spec.resources), so GPU counting has no pod-level term. A pod holds a node's resources from the
moment it is bound (spec.nodeName) until it terminates (phase Succeeded or Failed); a pod being
deleted still holds them until it is gone.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
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


# -- CPU, memory and pods (a Tenant's spec.limits) ---------------------------------------------------

LIMITED_RESOURCES = ("cpu", "memory", "pods")
# What spec.resources may set that labgate limits (hugepages may be set too; no limit counts them).
POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$"
)
_SCALE = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    **{s: Fraction(2 ** (10 * (i + 1))) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
}


def parse_quantity(value: Any) -> Fraction:
    """A Kubernetes quantity ("500m", "1.5Gi", "1e3", 8) exactly."""
    match = _QUANTITY.match(str(value).strip())
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, exponent, suffix = match.groups()
    scale = Fraction(10) ** int(exponent[1:]) if exponent else _SCALE[suffix or ""]
    return Fraction(number) * scale


def units(resource: str, value: Any) -> int:
    """A quantity in the scheduler's units, rounded up: millicores for cpu, bytes for memory, pods."""
    return math.ceil(parse_quantity(value) * (1000 if resource == "cpu" else 1))


def _container_asks(container: Json, resource: str) -> Fraction | None:
    resources = container.get("resources") or {}
    for where in ("requests", "limits"):
        if resource in (resources.get(where) or {}):
            return parse_quantity(resources[where][resource])
    return None


def _containers_request(pod_spec: Json, resource: str) -> Fraction:
    """The peak over a pod's phases: each plain init container beside the sidecars before it, then the
    app containers beside every sidecar."""
    phases: list[Fraction] = []
    sidecars = Fraction(0)
    for container in pod_spec.get("initContainers") or []:
        own = _container_asks(container, resource) or Fraction(0)
        if container.get("restartPolicy") == "Always":
            sidecars += own
        else:
            phases.append(sidecars + own)
    app = sum(
        (_container_asks(c, resource) or Fraction(0) for c in pod_spec.get("containers") or []), Fraction(0)
    )
    phases.append(sidecars + app)
    return max(phases)


def _pod_level_request(pod_spec: Json, resource: str) -> Fraction | None:
    if resource not in POD_LEVEL_RESOURCES:
        return None
    pod_level = pod_spec.get("resources") or {}
    requests = pod_level.get("requests") or {}
    if resource in requests:
        return parse_quantity(requests[resource])
    limits = pod_level.get("limits") or {}
    containers = [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]
    if resource in limits and all(_container_asks(c, resource) is None for c in containers):
        return parse_quantity(limits[resource])
    return None


def effective_request(pod_spec: Json, resource: str) -> int:
    """What the scheduler reserves on a node of `resource` for a pod with this spec: millicores of
    cpu, bytes of memory (summed exactly, rounded up once, as the scheduler's MilliValue and Value),
    1 pod."""
    if resource == "pods":
        return 1
    pod_level = _pod_level_request(pod_spec, resource)
    asked = _containers_request(pod_spec, resource) if pod_level is None else pod_level
    overhead = (pod_spec.get("overhead") or {}).get(resource)
    total = asked + (parse_quantity(overhead) if overhead is not None else 0)
    return math.ceil(total * (1000 if resource == "cpu" else 1))


def _is_live(pod: Json) -> bool:
    return (pod.get("status") or {}).get("phase") not in TERMINATED


def bound_requests(pods: Iterable[Json], *, namespaces: Iterable[str]) -> dict[str, int]:
    """The cpu (millicores), memory (bytes) and pods the scheduler has bound for the pods of these
    namespaces: those on a node that have not terminated."""
    wanted = set(namespaces)
    total = dict.fromkeys(LIMITED_RESOURCES, 0)
    for pod in pods:
        if pod["metadata"]["namespace"] not in wanted or not pod["spec"].get("nodeName") or not _is_live(pod):
            continue
        for resource in LIMITED_RESOURCES:
            total[resource] += effective_request(pod["spec"], resource)
    return total
