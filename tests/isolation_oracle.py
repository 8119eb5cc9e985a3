"""The isolation oracle: what each tenant's pods are bound to, judged from the API state alone.

Isolation is what a tenant's pods can touch, whoever created the objects. This module reads only
what the API holds (Tenants as declared, namespaces, nodes, pods, PersistentVolumes and their
claims, ResourceClaims and their allocations, ConfigMaps) and shares no code with labgate (no import
of cli, labgate, webhook or rbac: quantities, pools and ownership are worked out here again), so that a
mistake in labgate cannot hide in the tests that check it. For every tenant it asserts:

- placement: each of its bound pods runs on a node of one of its own pools or of a shared pool.
  A node's pool is its `labgate.io/node-pool` label. A pool belongs to the tenants whose
  `spec.placement.nodePools` select it (the entry's nodeSelector on that label, else its name),
  and to the tenant a node names (label `labgate.io/tenant`, or taint `labgate.io/pool=<tenant>`
  naming an existing Tenant). A pool of no tenant is shared; so is a node without a pool label.
- volumes: each PersistentVolume bound into its namespaces (claim.spec.volumeName and the volume's
  claimRef agree) is its own: labelled `labgate.io/tenant=<tenant>`, or unlabelled and dynamically
  provisioned (annotation `pv.kubernetes.io/provisioned-by`) for that very claim.
- GPUs: in-quota GPUs bound on nodes (tests.cluster_truth, which follows the scheduler's rules) plus
  the GPU devices its ResourceClaims hold (status.allocation) never exceed `spec.gpu.total`; no
  claim of the tenant holds a device with admin access.
- limits: in each of its namespaces, the cpu, memory and pods bound on nodes (tests.cluster_truth:
  the scheduler's count, pod-level spec.resources included) never exceed the Tenant's `spec.limits`.
  That is the bound the namespaces' ResourceQuotas hold race-free; across namespaces a burst faster
  than labgate's counting may bind up to the limit in each (docs/architecture.md, "Tenant-wide CPU,
  memory and pod limits"), so the tenant-wide limit is judged by the tests that create the pods, not
  here. Limits from labgate's policy config (`tenant_limits`) are not in the API state: not judged.
- devices: no container (init, ephemeral) carries a device-selection variable (env, or envFrom of a
  ConfigMap holding one) or mounts the NVIDIA toolkit's device-list path.
- identities: no pod runs as a service account that another tenant lists among its members.

Namespaces whose Tenant does not exist (any more) are not judged: nothing declares what they own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tests.cluster_truth import (
    LIMITED_RESOURCES,
    POOL_LABEL,
    TENANT_LABEL,
    TenantGpus,
    bound_requests,
    node_models,
    quota_overshoot,
    tenant_gpus,
    units,
)

Json = Mapping[str, Any]

POOL_TAINT = "labgate.io/pool"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
# Drivers whose devices are GPUs (the DRA drivers of NVIDIA, AMD and Intel).
GPU_DRIVERS = frozenset({"gpu.nvidia.com", "gpu.amd.com", "gpu.intel.com"})
# Environment variables that container toolkits read to choose which host devices a container sees.
DEVICE_VARIABLES = frozenset(
    {
        "NVIDIA_VISIBLE_DEVICES",
        "NVIDIA_DRIVER_CAPABILITIES",
        "NVIDIA_MIG_CONFIG_DEVICES",
        "NVIDIA_MIG_MONITOR_DEVICES",
        "ROCR_VISIBLE_DEVICES",
        "HIP_VISIBLE_DEVICES",
        "GPU_DEVICE_ORDINAL",
        "ZE_AFFINITY_MASK",
    }
)
# The directory whose mounts the NVIDIA toolkit reads as a device list (volume-mounts mode).
DEVICE_LIST_PATH = "/var/run/nvidia-container-devices"
CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


@dataclass(frozen=True)
class ApiState:
    """What the API holds, as lists of objects in their wire form (`kubectl get -o json` items)."""

    tenants: list[Json]
    namespaces: list[Json]
    nodes: list[Json] = field(default_factory=list)
    pods: list[Json] = field(default_factory=list)
    persistent_volumes: list[Json] = field(default_factory=list)
    claims: list[Json] = field(default_factory=list)
    resource_claims: list[Json] = field(default_factory=list)
    config_maps: list[Json] = field(default_factory=list)


def collect(list_items: Callable[[str], list[Json]]) -> ApiState:
    """The state from a lister: `list_items(resource)` returns every object of that resource in every
    namespace ([] when the API does not serve it, e.g. resource.k8s.io on an older cluster)."""
    return ApiState(
        tenants=list_items("tenants.labgate.io"),
        namespaces=list_items("namespaces"),
        nodes=list_items("nodes"),
        pods=list_items("pods"),
        persistent_volumes=list_items("persistentvolumes"),
        claims=list_items("persistentvolumeclaims"),
        resource_claims=list_items("resourceclaims.resource.k8s.io"),
        config_maps=list_items("configmaps"),
    )


def _name(obj: Json) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _namespace(obj: Json) -> str:
    return str((obj.get("metadata") or {}).get("namespace", ""))


def _labels(obj: Json) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def namespace_tenants(state: ApiState) -> dict[str, str]:
    """namespace -> tenant, for the namespaces labelled for a Tenant that exists."""
    existing = {_name(t) for t in state.tenants}
    result = {}
    for ns in state.namespaces:
        tenant = _labels(ns).get(TENANT_LABEL)
        if tenant in existing:
            result[_name(ns)] = tenant
    return result


def pool_owners(state: ApiState) -> dict[str, set[str]]:
    """pool -> the tenants it belongs to (a pool absent here, or with no owner, is shared)."""
    owners: dict[str, set[str]] = {}
    existing = {_name(t) for t in state.tenants}
    for tenant in state.tenants:
        pools = ((tenant.get("spec") or {}).get("placement") or {}).get("nodePools") or []
        for pool in pools:
            selector = pool.get("nodeSelector") or {}
            owners.setdefault(str(selector.get(POOL_LABEL, pool.get("name", ""))), set()).add(_name(tenant))
    for node in state.nodes:
        pool = _labels(node).get(POOL_LABEL)
        if pool is None:
            continue
        named = {_labels(node).get(TENANT_LABEL)}
        named |= {
            t.get("value") for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") == POOL_TAINT
        }
        owners.setdefault(pool, set()).update(n for n in named if n in existing)
    return owners


def _placement(state: ApiState, tenants: Mapping[str, str]) -> list[str]:
    owners = pool_owners(state)
    pools = {_name(n): _labels(n).get(POOL_LABEL) for n in state.nodes}
    found = []
    for pod in state.pods:
        tenant = tenants.get(_namespace(pod))
        node = (pod.get("spec") or {}).get("nodeName")
        if tenant is None or not node:
            continue
        pool = pools.get(node)
        held_by = owners.get(pool, set()) if pool is not None else set()
        if held_by and tenant not in held_by:
            found.append(
                f'pod {_namespace(pod)}/{_name(pod)} of tenant "{tenant}" runs on node "{node}" of pool '
                f'"{pool}", which belongs to {", ".join(sorted(held_by))}'
            )
    return found


def _volume_owner_problem(volume: Json, claim: Json, tenant: str) -> str | None:
    """Why `volume`, bound to `claim`, is not `tenant`'s; None when it is."""
    labelled = _labels(volume).get(TENANT_LABEL)
    if labelled is not None:
        return None if labelled == tenant else f'it is labelled for tenant "{labelled}"'
    annotations = (volume.get("metadata") or {}).get("annotations") or {}
    ref = (volume.get("spec") or {}).get("claimRef") or {}
    claim_uid = (claim.get("metadata") or {}).get("uid")
    if PROVISIONED_BY in annotations and ref.get("uid") in (None, claim_uid):
        return None
    return "it is neither labelled for a tenant nor provisioned for this claim"


def _volumes(state: ApiState, tenants: Mapping[str, str]) -> list[str]:
    volumes = {_name(v): v for v in state.persistent_volumes}
    found = []
    for claim in state.claims:
        tenant = tenants.get(_namespace(claim))
        volume = volumes.get(str((claim.get("spec") or {}).get("volumeName") or ""))
        if tenant is None or volume is None:
            continue
        ref = (volume.get("spec") or {}).get("claimRef") or {}
        if (ref.get("namespace"), ref.get("name")) != (_namespace(claim), _name(claim)):
            continue  # not bound both ways: the claim cannot be mounted
        problem = _volume_owner_problem(volume, claim, tenant)
        if problem is not None:
            found.append(
                f'PersistentVolume "{_name(volume)}" is bound to claim {_namespace(claim)}/{_name(claim)} '
                f'of tenant "{tenant}", but {problem}'
            )
    return found


def allocated_gpu_devices(claim: Json) -> int:
    """GPU devices a ResourceClaim holds (its allocation's results), admin-access ones left out."""
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    return sum(1 for r in results if r.get("driver") in GPU_DRIVERS and not r.get("adminAccess"))


def _has_admin_access(claim: Json) -> bool:
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
        "results"
    ) or []
    return any(r.get("adminAccess") for r in results)


def _gpus(state: ApiState, tenants: Mapping[str, str]) -> list[str]:
    bound = tenant_gpus(state.pods, namespace_tenants=tenants, models=node_models(state.nodes))
    dra: dict[str, int] = {}
    found = []
    for claim in state.resource_claims:
        tenant = tenants.get(_namespace(claim))
        if tenant is None:
            continue
        dra[tenant] = dra.get(tenant, 0) + allocated_gpu_devices(claim)
        if _has_admin_access(claim):
            found.append(
                f'ResourceClaim {_namespace(claim)}/{_name(claim)} of tenant "{tenant}" holds devices with admin access'
            )
    for tenant_obj in state.tenants:
        tenant = _name(tenant_obj)
        quota = (tenant_obj.get("spec") or {}).get("gpu") or {}
        gpus = bound.get(tenant, TenantGpus())
        counted = TenantGpus(
            bound_total=gpus.bound_total + dra.get(tenant, 0), bound_by_model=gpus.bound_by_model
        )
        overshoot = quota_overshoot(counted, quota)
        if overshoot > 0:
            found.append(
                f'tenant "{tenant}" holds {gpus.bound_total} GPUs bound on nodes and {dra.get(tenant, 0)} '
                f"allocated through ResourceClaims, {overshoot} beyond its quota {dict(quota)}"
            )
    return found


def _limits(state: ApiState, tenants: Mapping[str, str]) -> list[str]:
    found = []
    for tenant_obj in state.tenants:
        tenant = _name(tenant_obj)
        limits = (tenant_obj.get("spec") or {}).get("limits") or {}
        for namespace in sorted(ns for ns, owner in tenants.items() if owner == tenant):
            bound = bound_requests(state.pods, namespaces=[namespace])
            for resource in LIMITED_RESOURCES:
                limit = limits.get(resource)
                if limit is not None and bound[resource] > units(resource, limit):
                    found.append(
                        f'namespace "{namespace}" of tenant "{tenant}" has {bound[resource]} {_unit(resource)} '
                        f"bound on nodes, beyond its spec.limits.{resource} {limit}"
                    )
    return found


def _unit(resource: str) -> str:
    return {"cpu": "millicores of cpu", "memory": "bytes of memory"}.get(resource, resource)


def _config_map_keys(state: ApiState) -> dict[tuple[str, str], set[str]]:
    return {
        (_namespace(c), _name(c)): set(c.get("data") or {}) | set(c.get("binaryData") or {})
        for c in state.config_maps
    }


def container_device_variables(pod: Json, config_maps: Mapping[tuple[str, str], set[str]]) -> list[str]:
    """Where each container of the pod selects host devices: 'containers[0] ("main") env NVIDIA_...'."""
    found = []
    spec = pod.get("spec") or {}
    for group in CONTAINER_LISTS:
        for i, container in enumerate(spec.get(group) or []):
            where = f'{group}[{i}] ("{container.get("name", "")}")'
            for env in container.get("env") or []:
                if env.get("name") in DEVICE_VARIABLES:
                    found.append(f"{where} sets {env['name']}")
            for source in container.get("envFrom") or []:
                ref = source.get("configMapRef") or {}
                prefix = source.get("prefix", "")
                keys = config_maps.get((_namespace(pod), str(ref.get("name", ""))), set())
                for key in sorted(keys):
                    if prefix + key in DEVICE_VARIABLES:
                        found.append(f"{where} sets {prefix + key} from ConfigMap {ref.get('name')}")
            for mount in container.get("volumeMounts") or []:
                path = str(mount.get("mountPath", "")).rstrip("/")
                if path == DEVICE_LIST_PATH or path.startswith(DEVICE_LIST_PATH + "/"):
                    found.append(f"{where} mounts {path}")
    return found


def _devices(state: ApiState, tenants: Mapping[str, str]) -> list[str]:
    config_maps = _config_map_keys(state)
    found = []
    for pod in state.pods:
        tenant = tenants.get(_namespace(pod))
        if tenant is None:
            continue
        for where in container_device_variables(pod, config_maps):
            found.append(f'pod {_namespace(pod)}/{_name(pod)} of tenant "{tenant}": {where}')
    return found


def _identities(state: ApiState, tenants: Mapping[str, str]) -> list[str]:
    trusted: dict[tuple[str, str], set[str]] = {}
    for tenant_obj in state.tenants:
        members = (tenant_obj.get("spec") or {}).get("members") or {}
        for role in ("admins", "researchers"):
            for subject in members.get(role) or []:
                if subject.get("kind") == "ServiceAccount":
                    key = (str(subject.get("namespace", "")), str(subject.get("name", "")))
                    trusted.setdefault(key, set()).add(_name(tenant_obj))
    found = []
    for pod in state.pods:
        tenant = tenants.get(_namespace(pod))
        if tenant is None:
            continue
        account = (pod.get("spec") or {}).get("serviceAccountName") or "default"
        others = trusted.get((_namespace(pod), account), set()) - {tenant}
        if others:
            found.append(
                f'pod {_namespace(pod)}/{_name(pod)} of tenant "{tenant}" runs as service account '
                f'"{account}", a member of tenant {", ".join(sorted(others))}'
            )
    return found


def violations(state: ApiState) -> list[str]:
    """Every isolation violation the state shows, one sentence each naming the objects."""
    tenants = namespace_tenants(state)
    return [
        *_placement(state, tenants),
        *_volumes(state, tenants),
        *_gpus(state, tenants),
        *_limits(state, tenants),
        *_devices(state, tenants),
        *_identities(state, tenants),
    ]
