"""What a pod asks of CPU, memory and pod slots, as the scheduler counts them, and a tenant's sum
(pure): the usage the `tenant-quota` rule (policies/labgate/rules/tenant_quota) compares with a
tenant's `spec.limits`.

Per resource r (cpu, memory) a container asks `requests[r]`, else `limits[r]` (the apiserver
defaults a missing request to the limit), and the pod asks Kubernetes' effective request
(`PodRequests` in k8s.io/component-helpers/resource)

    pod-level request of r, where the pod sets one (spec.resources), else
    max(sum over containers and native sidecars, max over each plain init container i of
        (i + the sidecars started before it))
    + spec.overhead[r]

in millicores and bytes, each quantity rounded up (as the Rego rule counts); every pod is one pod.
The pod-level request is `spec.resources.requests[r]`, else `spec.resources.limits[r]` when no
container names r (the apiserver's defaulting; when one does, it defaults to the containers' sum,
which changes nothing). The reconciler sums the live (not finished) pods of a tenant's namespaces
and writes the sum into the tenant's ledger (`Ledger.workloads`), which the webhook reads from its
cache.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from labgate.gpu_accounting.demand import is_sidecar, quantity

# The resources limited, in counting units: millicores, bytes, pods.
LIMITED_RESOURCES = ("cpu", "memory", "pods")

FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


def _mapping(value: Any) -> Mapping[str, Any]:
    # A parsed object's fields are dicts or absent: both answered before the ABC's slower check.
    if type(value) is dict:
        return value
    return {} if value is None or not isinstance(value, Mapping) else value


def _units(resource: str, value: Any) -> int:
    """A quantity in counting units: millicores for cpu, bytes for memory, a count for pods."""
    number = quantity(value) * (1000 if resource == "cpu" else 1)
    return math.ceil(number)


def _requested(container: Mapping[str, Any], resource: str) -> int:
    resources = _mapping(container.get("resources"))
    asked = {**_mapping(resources.get("limits")), **_mapping(resources.get("requests"))}
    return _units(resource, asked[resource]) if resource in asked else 0


def _names(container: Mapping[str, Any], resource: str) -> bool:
    resources = _mapping(container.get("resources"))
    return any(resource in _mapping(resources.get(where)) for where in ("requests", "limits"))


def _all_containers(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found: list[Mapping[str, Any]] = []
    for group in ("containers", "initContainers"):
        items = spec.get(group)
        found.extend(_mapping(c) for c in (items if isinstance(items, list) else []))
    return found


def _pod_level_request(spec: Mapping[str, Any], resource: str) -> int | None:
    """The pod-level request of `resource` (spec.resources, Kubernetes' PodLevelResources: cpu and
    memory) in counting units, or None when the pod leaves it to its containers. A pod-level limit
    without a request is the request when no container names the resource, as the apiserver
    defaults it."""
    pod_level = _mapping(spec.get("resources"))
    requests = _mapping(pod_level.get("requests"))
    if resource in requests:
        return _units(resource, requests[resource])
    limits = _mapping(pod_level.get("limits"))
    if resource in limits and not any(_names(c, resource) for c in _all_containers(spec)):
        return _units(resource, limits[resource])
    return None


def effective_request(spec: Mapping[str, Any], resource: str) -> int:
    """What the scheduler reserves of `resource` (cpu: millicores, memory: bytes) for this spec: its
    pod-level request where set, else its containers', plus the overhead."""
    overhead = _mapping(spec.get("overhead"))
    extra = _units(resource, overhead[resource]) if resource in overhead else 0
    pod_level = _pod_level_request(spec, resource)
    return (_containers_request(spec, resource) if pod_level is None else pod_level) + extra


def _containers_request(spec: Mapping[str, Any], resource: str) -> int:
    """What a spec's containers ask of `resource` together: app containers and native sidecars, or
    the largest plain init container with the sidecars started before it, whichever is larger."""
    containers = spec.get("containers")
    running = sum(
        _requested(_mapping(c), resource) for c in (containers if isinstance(containers, list) else [])
    )
    sidecars = 0
    init_peak = 0
    init_containers = spec.get("initContainers")
    for item in init_containers if isinstance(init_containers, list) else []:
        container = _mapping(item)
        own = _requested(container, resource)
        if is_sidecar(container):
            sidecars += own
            running += own
        else:
            init_peak = max(init_peak, own + sidecars)
    return max(running, init_peak)


def pod_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """A pod's cpu (millicores), memory (bytes) and pods (1), as the scheduler counts them."""
    spec = _mapping(pod.get("spec"))
    return {"cpu": effective_request(spec, "cpu"), "memory": effective_request(spec, "memory"), "pods": 1}


def tenant_usage(pods: Iterable[tuple[str, Mapping[str, int]]]) -> dict[str, int]:
    """The sum of the requests of the (phase, requests) pods that are not finished: what a tenant's
    live pods hold (resources at zero left out: no pods, no usage)."""
    total = dict.fromkeys(LIMITED_RESOURCES, 0)
    for phase, requests in pods:
        if phase in FINISHED_PHASES:
            continue
        for resource in LIMITED_RESOURCES:
            total[resource] += requests.get(resource, 0)
    return {resource: n for resource, n in total.items() if n}


def limit_units(value: Any, resource: str) -> int | None:
    """A limit (a quantity, or None for none) in counting units."""
    return None if value is None else _units(resource, value)


def quantity_text(resource: str, units: int) -> str:
    """Counting units as a Kubernetes quantity, for a ResourceQuota's `hard`: "8", "500m", "64Gi"."""
    if resource == "cpu":
        return str(units // 1000) if units % 1000 == 0 else f"{units}m"
    if resource == "memory":
        for suffix, size in (("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
            if units and units % size == 0:
                return f"{units // size}{suffix}"
    return str(units)
