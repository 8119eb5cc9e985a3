"""The isolation oracle on hand-written API states: a clean state is clean, and each kind of
violation is caught, with the objects named."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.isolation_oracle import ApiState, collect, pool_owners, violations

IMAGE = "registry.lab.example/research/trainer:v1"


def _tenant(
    name: str, *, pools: tuple[str, ...] = (), gpus: int = 8, accounts: tuple[tuple[str, str], ...] = ()
) -> Any:
    return {
        "metadata": {"name": name},
        "spec": {
            "members": {
                "admins": [{"kind": "User", "name": f"{name}-admin"}],
                "researchers": [
                    {"kind": "ServiceAccount", "namespace": ns, "name": sa} for ns, sa in accounts
                ],
            },
            "gpu": {"total": gpus},
            "placement": {
                "nodePools": [{"name": p, "nodeSelector": {"labgate.io/node-pool": p}} for p in pools]
            },
        },
    }


def _namespace(name: str, tenant: str | None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"labgate.io/tenant": tenant} if tenant else {}}}


def _node(name: str, pool: str | None, *, taint_tenant: str | None = None) -> dict[str, Any]:
    taints = (
        [{"key": "labgate.io/pool", "value": taint_tenant, "effect": "NoSchedule"}] if taint_tenant else []
    )
    return {
        "metadata": {"name": name, "labels": {"labgate.io/node-pool": pool} if pool else {}},
        "spec": {"taints": taints},
    }


def _pod(namespace: str, name: str, node: str | None, *, gpus: int = 0, **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": IMAGE}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    container.update(spec.pop("container", {}))
    body: dict[str, Any] = {"containers": [container], **spec}
    if node:
        body["nodeName"] = node
    return {"metadata": {"name": name, "namespace": namespace}, "spec": body, "status": {"phase": "Running"}}


def _volume(
    name: str, *, tenant: str | None, bound_to: tuple[str, str, str], provisioned: bool = False
) -> Any:
    annotations = {"pv.kubernetes.io/provisioned-by": "csi.example.com"} if provisioned else {}
    namespace, claim, uid = bound_to
    return {
        "metadata": {
            "name": name,
            "labels": {"labgate.io/tenant": tenant} if tenant else {},
            "annotations": annotations,
        },
        "spec": {"claimRef": {"namespace": namespace, "name": claim, "uid": uid}},
    }


def _claim(namespace: str, name: str, volume: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid}, "spec": {"volumeName": volume}}


def _resource_claim(namespace: str, name: str, devices: int, *, admin: bool = False) -> dict[str, Any]:
    results = [
        {
            "request": "gpu",
            "driver": "gpu.nvidia.com",
            "pool": "node-1",
            "device": f"gpu-{i}",
            **({"adminAccess": True} if admin else {}),
        }
        for i in range(devices)
    ]
    return {
        "metadata": {"name": name, "namespace": namespace},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def clean_state() -> ApiState:
    """Two tenants with a pool each, a shared pool, a tenant's own volumes, DRA within quota."""
    return ApiState(
        tenants=[
            _tenant("vision", pools=("vision-h100",), gpus=8),
            _tenant("nlp", pools=("nlp-a100",), gpus=4),
        ],
        namespaces=[
            _namespace("vision", "vision"),
            _namespace("vision-exp", "vision"),
            _namespace("nlp", "nlp"),
            _namespace("kube-system", None),
            _namespace("gone", "deleted-tenant"),
        ],
        nodes=[
            _node("h100-0", "vision-h100"),
            _node("a100-0", "nlp-a100", taint_tenant="nlp"),
            _node("mig-0", "shared-mig"),
            _node("plain-0", None),
        ],
        pods=[
            _pod("vision", "train", "h100-0", gpus=4),
            _pod("vision-exp", "cpu", "mig-0"),
            _pod("vision", "pending", None, gpus=8),
            _pod("nlp", "train", "a100-0", gpus=2),
            _pod(
                "nlp", "tools", "plain-0", container={"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}]}
            ),
            _pod(
                "kube-system",
                "dns",
                "h100-0",
                container={"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]},
            ),
            # A namespace of a Tenant that is gone: nothing declares what it owns.
            _pod("gone", "left", "a100-0"),
        ],
        persistent_volumes=[
            _volume("pv-vision", tenant="vision", bound_to=("vision", "data", "u1")),
            _volume("pvc-123", tenant=None, bound_to=("nlp", "scratch", "u2"), provisioned=True),
            # Reserved for a vision claim by the binder, but the claim never took it: not mountable.
            _volume("pv-nlp", tenant="nlp", bound_to=("vision", "grab", "u3")),
        ],
        claims=[
            _claim("vision", "data", "pv-vision", "u1"),
            _claim("nlp", "scratch", "pvc-123", "u2"),
            {"metadata": {"name": "grab", "namespace": "vision", "uid": "u3"}, "spec": {}},
        ],
        resource_claims=[_resource_claim("vision", "dra", 4), _resource_claim("nlp", "dra", 2)],
    )


def test_the_clean_state_is_clean() -> None:
    assert violations(clean_state()) == []


def test_a_pod_on_another_tenants_pool_is_caught() -> None:
    state = clean_state()
    state.pods.append(_pod("vision", "squat", "a100-0"))
    assert violations(state) == [
        'pod vision/squat of tenant "vision" runs on node "a100-0" of pool "nlp-a100", which belongs to nlp'
    ]


def test_a_pod_on_an_untainted_pool_of_another_tenant_is_caught() -> None:
    """A pool is its tenant's because the Tenant lists it, not because a taint says so."""
    state = clean_state()
    state.pods.append(_pod("nlp", "squat", "h100-0"))
    assert violations(state) == [
        'pod nlp/squat of tenant "nlp" runs on node "h100-0" of pool "vision-h100", which belongs to vision'
    ]


def test_a_pool_is_owned_by_its_tenants_entries_and_by_the_nodes_that_name_a_tenant() -> None:
    state = clean_state()
    state.nodes.append(_node("x-0", "unlisted", taint_tenant="vision"))
    state.nodes.append(_node("y-0", "free", taint_tenant="not-a-tenant"))
    owners = pool_owners(state)
    assert owners["vision-h100"] == {"vision"}
    assert owners["nlp-a100"] == {"nlp"}
    assert owners["unlisted"] == {"vision"}
    assert owners["free"] == set()
    assert owners["shared-mig"] == set()


@pytest.mark.parametrize(
    ("volume", "why"),
    [
        (
            _volume("pv-x", tenant="nlp", bound_to=("vision", "steal", "u9")),
            'it is labelled for tenant "nlp"',
        ),
        (
            _volume("pv-x", tenant=None, bound_to=("vision", "steal", "u9")),
            "it is neither labelled for a tenant nor provisioned for this claim",
        ),
        (
            _volume("pv-x", tenant=None, bound_to=("vision", "steal", "other-uid"), provisioned=True),
            "it is neither labelled for a tenant nor provisioned for this claim",
        ),
    ],
)
def test_a_volume_that_is_not_the_tenants_own_is_caught(volume: Any, why: str) -> None:
    state = clean_state()
    state.persistent_volumes.append(volume)
    state.claims.append(_claim("vision", "steal", "pv-x", "u9"))
    assert violations(state) == [
        f'PersistentVolume "pv-x" is bound to claim vision/steal of tenant "vision", but {why}'
    ]


def test_gpus_bound_plus_dra_devices_allocated_beyond_quota_are_caught() -> None:
    state = clean_state()
    state.resource_claims.append(_resource_claim("vision-exp", "more", 1))
    assert violations(state) == [
        'tenant "vision" holds 4 GPUs bound on nodes and 5 allocated through ResourceClaims, '
        "1 beyond its quota {'total': 8}"
    ]


def test_pods_bound_beyond_quota_are_caught_without_any_claim() -> None:
    state = clean_state()
    state.resource_claims.clear()
    state.pods.append(_pod("nlp", "more", "a100-0", gpus=3))
    assert violations(state) == [
        'tenant "nlp" holds 5 GPUs bound on nodes and 0 allocated through ResourceClaims, '
        "1 beyond its quota {'total': 4}"
    ]


def test_a_claim_holding_devices_with_admin_access_is_caught_and_not_counted() -> None:
    state = clean_state()
    state.resource_claims.append(_resource_claim("nlp", "watch", 8, admin=True))
    assert violations(state) == ['ResourceClaim nlp/watch of tenant "nlp" holds devices with admin access']


@pytest.mark.parametrize(
    ("container", "where"),
    [
        ({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}, "sets NVIDIA_VISIBLE_DEVICES"),
        ({"env": [{"name": "ROCR_VISIBLE_DEVICES", "value": "0"}]}, "sets ROCR_VISIBLE_DEVICES"),
        ({"env": [{"name": "ZE_AFFINITY_MASK", "value": "0"}]}, "sets ZE_AFFINITY_MASK"),
        (
            {"envFrom": [{"configMapRef": {"name": "gpu-env"}, "prefix": "NVIDIA_"}]},
            "sets NVIDIA_VISIBLE_DEVICES from ConfigMap gpu-env",
        ),
        (
            {"volumeMounts": [{"name": "d", "mountPath": "/var/run/nvidia-container-devices/all"}]},
            "mounts /var/run/nvidia-container-devices/all",
        ),
    ],
)
def test_a_device_selection_variable_or_mount_is_caught(container: dict[str, Any], where: str) -> None:
    state = clean_state()
    state.config_maps.append(
        {"metadata": {"name": "gpu-env", "namespace": "vision"}, "data": {"VISIBLE_DEVICES": "all"}}
    )
    state.pods.append(_pod("vision", "peek", "h100-0", container=container))
    assert violations(state) == [f'pod vision/peek of tenant "vision": containers[0] ("main") {where}']


def test_init_and_ephemeral_containers_are_looked_at_too() -> None:
    state = clean_state()
    pod = _pod("vision", "peek", "h100-0")
    bad = {"name": "x", "image": IMAGE, "env": [{"name": "HIP_VISIBLE_DEVICES", "value": "1"}]}
    pod["spec"]["initContainers"] = [bad]
    pod["spec"]["ephemeralContainers"] = [copy.deepcopy(bad)]
    state.pods.append(pod)
    assert violations(state) == [
        'pod vision/peek of tenant "vision": initContainers[0] ("x") sets HIP_VISIBLE_DEVICES',
        'pod vision/peek of tenant "vision": ephemeralContainers[0] ("x") sets HIP_VISIBLE_DEVICES',
    ]


def test_a_pod_running_as_another_tenants_identity_is_caught() -> None:
    state = clean_state()
    state.tenants[1] = _tenant("nlp", pools=("nlp-a100",), gpus=4, accounts=(("vision", "runner"),))
    state.pods.append(_pod("vision", "ci", "h100-0", serviceAccountName="runner"))
    # nlp's own pod could run as it, were it in nlp's namespace; vision's may not.
    assert violations(state) == [
        'pod vision/ci of tenant "vision" runs as service account "runner", a member of tenant nlp'
    ]


def _memory_pod(namespace: str, name: str, node: str | None, pod_level: str) -> dict[str, Any]:
    """Containers asking 256Mi, spec.resources asking `pod_level` (the scheduler's count)."""
    return _pod(
        namespace,
        name,
        node,
        container={"resources": {"requests": {"memory": "256Mi"}}},
        resources={"requests": {"memory": pod_level}},
    )


def test_a_namespace_binding_beyond_its_tenants_limits_is_caught_with_pod_level_resources() -> None:
    state = clean_state()
    state.tenants[0]["spec"]["limits"] = {"memory": "1Ti", "pods": 4}
    state.pods.append(_memory_pod("vision", "big-1", "h100-0", "600Gi"))
    state.pods.append(_memory_pod("vision-exp", "big-2", "mig-0", "600Gi"))
    state.pods.append(_memory_pod("vision", "waiting", None, "600Gi"))  # not bound: holds nothing
    assert violations(state) == []  # 600Gi in each namespace: within what each namespace may bind
    state.pods.append(_memory_pod("vision", "big-3", "h100-0", "600Gi"))
    assert violations(state) == [
        f'namespace "vision" of tenant "vision" has {1200 << 30} bytes of memory bound on nodes, '
        "beyond its spec.limits.memory 1Ti"
    ]


def test_collect_lists_every_resource_the_oracle_reads() -> None:
    asked: list[str] = []

    def list_items(resource: str) -> list[Any]:
        asked.append(resource)
        return []

    state = collect(list_items)
    assert violations(state) == []
    assert asked == [
        "tenants.labgate.io",
        "namespaces",
        "nodes",
        "pods",
        "persistentvolumes",
        "persistentvolumeclaims",
        "resourceclaims.resource.k8s.io",
        "configmaps",
    ]
