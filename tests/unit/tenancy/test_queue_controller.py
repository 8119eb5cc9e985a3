"""The reconciler with Kueue (reconcile --kueue) on fakes of its doors: it keeps each tenant's queues
and its pools' flavors, shows queued workloads in the status, and removes them with the Tenant."""

from __future__ import annotations

import copy
from typing import Any

from labgate.core.api_resources import (
    CLUSTER_QUEUE,
    LOCAL_QUEUE,
    NAMESPACE,
    RESOURCE_FLAVOR,
    TENANT,
    WORKLOAD,
    Kind,
)
from labgate.gpu_accounting.demand import GpuCounting
from rbac.desired import object_key
from rbac.reconciler import Doors, PolicyConfig, Reconciler
from tests.unit.tenancy.test_controllers import (
    NAMESPACE_OBJECT,
    TENANT_OBJECT,
    FakeKube,
    FakeLeader,
    FakeLedgers,
    FakeSettled,
    drain,
)

POOL = {"name": "h100-spot", "nodeSelector": {"labgate.io/node-pool": "h100-spot"}, "spot": True}
TENANT_WITH_POOL: dict[str, Any] = {
    **TENANT_OBJECT,
    "spec": {**TENANT_OBJECT["spec"], "placement": {"nodePools": [POOL]}},
}
CLUSTER_QUEUE_KEY = ("kueue.x-k8s.io/v1beta2", "ClusterQueue", "", "vision")
LOCAL_QUEUE_KEY = ("kueue.x-k8s.io/v1beta2", "LocalQueue", "vision", "default")
FLAVOR_KEY = ("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "", "h100-spot")
TOTAL_FLAVOR_KEY = ("kueue.x-k8s.io/v1beta2", "ResourceFlavor", "", "labgate-tenant-total")


class DeletingKube(FakeKube):
    def __init__(self) -> None:
        super().__init__()
        self.deleted: list[tuple[str, str, str]] = []

    def delete(
        self, kind: Kind, name: str, *, namespace: str | None = None, resource_version: str | None = None
    ) -> bool:
        self.deleted.append((kind.kind, namespace or "", name))
        return True


def make(
    *, kueue: bool, tenant: dict[str, Any] = TENANT_WITH_POOL, policy: PolicyConfig | None = None
) -> tuple[Reconciler, DeletingKube]:
    kube = DeletingKube()
    for obj in (tenant, NAMESPACE_OBJECT):
        kube.objects[object_key(obj)] = copy.deepcopy(obj)
    doors = Doors(
        kube=kube,  # type: ignore[arg-type]  # fakes of the calls the controllers make
        leader=FakeLeader(),  # type: ignore[arg-type]
        ledgers=FakeLedgers(),  # type: ignore[arg-type]
        settled=FakeSettled(),  # type: ignore[arg-type]
    )
    reconciler = Reconciler(
        None, namespace="labgate-system", identity="test", doors=doors, kueue=kueue, policy=policy
    )
    for reflector in reconciler.reflectors:
        reflector.has_synced.set()
    reconciler.observe(NAMESPACE, "ADDED", NAMESPACE_OBJECT)
    reconciler.observe(TENANT, "ADDED", copy.deepcopy(tenant))
    return reconciler, kube


def queued_workload(gpus: int, count: int) -> dict[str, Any]:
    container = {"name": "main", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-gang", "namespace": "vision"},
        "spec": {
            "podSets": [{"name": "main", "count": count, "template": {"spec": {"containers": [container]}}}]
        },
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False"}]},
    }


def test_with_kueue_the_tenant_gets_its_queues_and_its_pools_flavor() -> None:
    reconciler, kube = make(kueue=True)
    drain(reconciler)
    assert {CLUSTER_QUEUE_KEY, LOCAL_QUEUE_KEY, FLAVOR_KEY, TOTAL_FLAVOR_KEY} <= set(kube.applies)
    # The queue's kinds are watched (drift repaired like the rest), and so are Workloads.
    watched = {r.name for r in reconciler.reflectors}
    assert {"clusterqueues", "localqueues", "resourceflavors", "workloads"} <= watched
    status = kube.objects[("labgate.io/v1alpha1", "Tenant", "", "vision")]["status"]["gpu"]
    assert (status["queuedWorkloads"], status["queuedGpus"]) == (0, 0)


def test_a_queued_workload_shows_in_the_status_with_its_gpus() -> None:
    reconciler, kube = make(kueue=True)
    drain(reconciler)
    reconciler.observe(WORKLOAD, "ADDED", queued_workload(8, 4))
    drain(reconciler)
    status = kube.objects[("labgate.io/v1alpha1", "Tenant", "", "vision")]["status"]["gpu"]
    assert (status["queuedWorkloads"], status["queuedGpus"]) == (1, 32)


def test_a_removed_tenants_queues_and_unnamed_flavors_are_deleted() -> None:
    reconciler, kube = make(kueue=True)
    drain(reconciler)
    for kind, key in (
        (CLUSTER_QUEUE, CLUSTER_QUEUE_KEY),
        (LOCAL_QUEUE, LOCAL_QUEUE_KEY),
        (RESOURCE_FLAVOR, FLAVOR_KEY),
        (RESOURCE_FLAVOR, TOTAL_FLAVOR_KEY),
    ):
        reconciler.observe(kind, "ADDED", copy.deepcopy(kube.objects[key]))
    reconciler.observe(TENANT, "DELETED", copy.deepcopy(TENANT_WITH_POOL))
    drain(reconciler)
    assert {("ClusterQueue", "", "vision"), ("LocalQueue", "vision", "default")} <= set(kube.deleted)
    assert ("ResourceFlavor", "", "h100-spot") in kube.deleted
    # The total's flavor goes with the last tenant.
    assert ("ResourceFlavor", "", "labgate-tenant-total") in kube.deleted


AMD_POOL = {
    "name": "mi300",
    "nodeSelector": {"labgate.io/node-pool": "mi300", "amd.com/gpu.product": "MI300X"},
    "spot": True,
}
TENANT_WITH_AMD_POOL: dict[str, Any] = {
    **TENANT_OBJECT,
    "spec": {
        **TENANT_OBJECT["spec"],
        "gpu": {"total": 8, "models": {"MI300X": 2}},
        "placement": {"nodePools": [AMD_POOL]},
    },
}


def gpu_quotas(kube: DeletingKube) -> list[str]:
    groups = kube.objects[CLUSTER_QUEUE_KEY]["spec"]["resourceGroups"]
    return [str(f["resources"][0]["nominalQuota"]) for g in groups for f in g["flavors"]]


def test_a_pools_model_quota_is_found_under_the_configured_model_label() -> None:
    policy = PolicyConfig(gpu_counting=GpuCounting(gpu_model_label="amd.com/gpu.product"))
    reconciler, kube = make(kueue=True, tenant=TENANT_WITH_AMD_POOL, policy=policy)
    drain(reconciler)
    # The pool's flavor holds the model's 2; the total's group, the tenant's 8.
    assert gpu_quotas(kube) == ["2", "8"]


def test_without_kueue_nothing_of_kueue_is_made_or_watched() -> None:
    reconciler, kube = make(kueue=False)
    drain(reconciler)
    assert not [k for k in kube.applies if k[0].startswith("kueue.x-k8s.io")]
    assert not {"clusterqueues", "workloads"} & {r.name for r in reconciler.reflectors}
    status = kube.objects[("labgate.io/v1alpha1", "Tenant", "", "vision")]["status"]["gpu"]
    assert "queuedWorkloads" not in status
