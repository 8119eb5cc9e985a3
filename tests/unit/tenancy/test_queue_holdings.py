"""The reconciler with Kueue, on fakes of its doors: a tenant's ClusterQueue GPU quota is lowered by
what its pods hold that Kueue did not admit, rewritten when a settlement finds that changed (paced
as settlements are), and whole again when those pods end; Kueue's own pods take nothing off it."""

from __future__ import annotations

import copy
from typing import Any

from labgate.core.api_resources import NAMESPACE, TENANT, WORKLOAD, Object
from rbac.desired import object_key
from rbac.reconciler import Doors, Pacing, Reconciler
from tests.unit.tenancy.test_controllers import (
    NAMESPACE_OBJECT,
    FakeKube,
    FakeLeader,
    FakeLedgers,
    FakeSettled,
    drain,
    drain_ready,
)
from tests.unit.tenancy.test_queue_controller import CLUSTER_QUEUE_KEY, TENANT_WITH_POOL

NODE = {
    "metadata": {
        "name": "h100-0",
        "labels": {"labgate.io/node-pool": "h100-spot", "nvidia.com/gpu.product": "H100"},
    },
    "status": {"allocatable": {"nvidia.com/gpu": "8"}},
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(*, clock: Clock | None = None) -> tuple[Reconciler, FakeKube]:
    kube = FakeKube()
    for obj in (TENANT_WITH_POOL, NAMESPACE_OBJECT):
        kube.objects[object_key(obj)] = copy.deepcopy(obj)
    doors = Doors(
        kube=kube,  # type: ignore[arg-type]  # fakes of the calls the controllers make
        leader=FakeLeader(),  # type: ignore[arg-type]
        ledgers=FakeLedgers(),  # type: ignore[arg-type]
        settled=FakeSettled(),  # type: ignore[arg-type]
    )
    pacing = Pacing(settle_seconds=1.0, status_seconds=2.0, clock=clock) if clock else Pacing(0.0, 0.0)
    reconciler = Reconciler(
        None, namespace="labgate-system", identity="test", doors=doors, kueue=True, pacing=pacing
    )
    for reflector in reconciler.reflectors:
        reflector.has_synced.set()
    reconciler.status.nodes.on_list([NODE])
    reconciler.observe(NAMESPACE, "ADDED", NAMESPACE_OBJECT)
    reconciler.observe(TENANT, "ADDED", copy.deepcopy(TENANT_WITH_POOL))
    return reconciler, kube


def gpu_pod(name: str, gpus: int, *, owner: tuple[str, str], node: str = "h100-0") -> Object:
    kind, uid = owner
    limits = {"nvidia.com/gpu": str(gpus)}
    return {
        "metadata": {
            "name": name,
            "namespace": "vision",
            "uid": f"uid-{name}",
            "ownerReferences": [
                {"apiVersion": "x", "kind": kind, "name": "o", "uid": uid, "controller": True}
            ],
        },
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"limits": limits}}]},
        "status": {"phase": "Running"},
    }


def nominal_quota(kube: FakeKube) -> str:
    flavor = kube.objects[CLUSTER_QUEUE_KEY]["spec"]["resourceGroups"][0]["flavors"][0]
    return str(flavor["resources"][0]["nominalQuota"])


def reasons(kube: FakeKube) -> list[str]:
    return [str(e["reason"]) for e in kube.events]


def job_workload(job_uid: str) -> dict[str, Any]:
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": job_uid, "controller": True}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-train", "namespace": "vision", "ownerReferences": [owner]},
        "spec": {"podSets": []},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]},
    }


def test_a_deployments_bound_gpus_lower_the_quota_until_its_pods_end() -> None:
    reconciler, kube = make()
    drain(reconciler)
    assert nominal_quota(kube) == "8"
    pod = gpu_pod("serve-0", 6, owner=("ReplicaSet", "rs-1"))
    reconciler.settlement.pods.on_event("ADDED", pod)
    drain(reconciler)
    assert nominal_quota(kube) == "2"
    # An adjustment, said as one: not a drift repair.
    assert "QueueQuotaAdjusted" in reasons(kube)
    assert "DriftRepaired" not in reasons(kube)
    reconciler.settlement.pods.on_event("DELETED", pod)
    drain(reconciler)
    assert nominal_quota(kube) == "8"
    assert reasons(kube).count("QueueQuotaAdjusted") == 2


def test_the_pods_of_a_job_kueue_admitted_take_nothing_off_the_quota() -> None:
    reconciler, kube = make()
    drain(reconciler)
    reconciler.observe(WORKLOAD, "ADDED", job_workload("job-1"))
    reconciler.settlement.pods.on_event("ADDED", gpu_pod("train-0", 8, owner=("Job", "job-1")))
    drain(reconciler)
    assert nominal_quota(kube) == "8"
    assert "QueueQuotaAdjusted" not in reasons(kube)
    # A Job no Workload owns (made before Kueue ran) is counted.
    reconciler.settlement.pods.on_event("ADDED", gpu_pod("old-0", 1, owner=("Job", "job-old")))
    drain(reconciler)
    assert nominal_quota(kube) == "7"


def test_pod_events_wake_the_queues_provisioning_at_the_settlements_pace_and_only_on_a_change() -> None:
    clock = Clock()
    reconciler, kube = make(clock=clock)
    drain_ready(reconciler)
    passes = reconciler.reconciled
    clock.now += 1.0  # past the interval of the first settlement (the tenant's arrival)
    reconciler.settlement.pods.on_event("ADDED", gpu_pod("serve-0", 1, owner=("ReplicaSet", "rs-1")))
    drain_ready(reconciler)
    assert (reconciler.reconciled, nominal_quota(kube)) == (passes + 1, "7")
    # A burst of pod events within the settlement's interval: no settlement and no pass yet...
    for i in range(1, 6):
        reconciler.settlement.pods.on_event("ADDED", gpu_pod(f"serve-{i}", 1, owner=("ReplicaSet", "rs-1")))
    drain_ready(reconciler)
    assert (reconciler.reconciled, nominal_quota(kube)) == (passes + 1, "7")
    # ...then one of each for the whole burst.
    clock.now += 1.0
    drain_ready(reconciler)
    assert (reconciler.reconciled, nominal_quota(kube)) == (passes + 2, "2")
    # A pod event that changes nothing held outside Kueue asks for no pass.
    clock.now += 1.0
    reconciler.settlement.pods.on_event("MODIFIED", gpu_pod("serve-0", 1, owner=("ReplicaSet", "rs-1")))
    drain_ready(reconciler)
    assert reconciler.reconciled == passes + 2
