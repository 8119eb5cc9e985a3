"""What a tenant's pods hold that Kueue did not admit (rbac/outside_queue.py), and the ClusterQueue's
GPU quota less it (rbac/queues.py): tables of cases, no cluster."""

from __future__ import annotations

from typing import Any

import pytest

from labgate.core.gpu_amount import GpuAmount
from labgate.core.tenant import Tenant
from labgate.gpu_accounting.claim_allocations import AllocatedDevices
from labgate.gpu_accounting.settlement import PodFacts
from rbac.outside_queue import (
    NOTHING_HELD,
    HeldOutsideQueue,
    held_outside_queue,
    workload_owner_uids,
)
from rbac.queues import UNLIMITED_GPUS, cluster_queue, gpu_quota

H100, A100 = "NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-80GB"
NODES = {"h100-0": H100, "a100-0": A100, "cpu-less-model": ""}
JOB_UID, RS_UID = "job-uid", "rs-uid"
WORKLOAD = {"metadata": {"ownerReferences": [{"kind": "Job", "name": "train", "uid": JOB_UID}]}}
POD_WORKLOAD = {"metadata": {"ownerReferences": [{"kind": "Pod", "name": "gated", "uid": "pod-own"}]}}
OWNERS = workload_owner_uids([WORKLOAD, POD_WORKLOAD, {"metadata": {}}])


def pod(
    name: str,
    gpus: int,
    *,
    node: str = "h100-0",
    owner: str = RS_UID,
    phase: str = "Running",
    model: str | None = None,
    gated: bool = False,
) -> PodFacts:
    return PodFacts(
        namespace="vision",
        name=name,
        phase=phase,
        gpus=GpuAmount(gpus, {model or "unspecified": gpus}),
        is_preemptible=False,
        is_scheduled=bool(node),
        is_gated=gated,
        node=node,
        controller_uid=owner,
    )


def held(pods: dict[str, PodFacts], **kw: Any) -> HeldOutsideQueue:
    return held_outside_queue(
        pods,
        workload_owners=kw.get("owners", OWNERS),
        node_models=kw.get("nodes", NODES),
        allocations=kw.get("allocations", {}),
    )


def test_the_owners_of_workloads_are_their_jobs_and_the_pods_of_the_pod_integration() -> None:
    assert workload_owner_uids([WORKLOAD, POD_WORKLOAD, {"metadata": {}}]) == {JOB_UID, "pod-own"}


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param(
            {"d1": pod("serve-1", 6)},
            HeldOutsideQueue(total=6, by_model={H100: 6}, pods=("vision/serve-1",)),
            id="a-deployments-bound-pod-of-its-nodes-model",
        ),
        pytest.param({"j1": pod("train-0", 8, owner=JOB_UID)}, NOTHING_HELD, id="a-job-pod-kueue-admitted"),
        pytest.param(
            {"pod-own": pod("single", 2, owner="")}, NOTHING_HELD, id="a-pod-of-kueues-pod-integration"
        ),
        pytest.param(
            {"b1": pod("bare", 2, owner="")},
            HeldOutsideQueue(total=2, by_model={H100: 2}, pods=("vision/bare",)),
            id="a-bare-pod-no-workload",
        ),
        pytest.param({"d1": pod("done", 6, phase="Succeeded")}, NOTHING_HELD, id="finished"),
        pytest.param({"d1": pod("gone", 6, phase="Failed")}, NOTHING_HELD, id="failed"),
        pytest.param({"g1": pod("gated", 4, node="", gated=True)}, NOTHING_HELD, id="behind-kueues-gate"),
        pytest.param({"c1": pod("notebook", 0)}, NOTHING_HELD, id="no-gpus"),
        pytest.param(
            {"p1": pod("pending", 2, node="", model=A100)},
            HeldOutsideQueue(total=2, by_model={A100: 2}, pods=("vision/pending",)),
            id="pending-counted-by-the-model-it-asks",
        ),
        pytest.param(
            {"p1": pod("pending", 2, node="")},
            HeldOutsideQueue(total=2, unplaced=2, pods=("vision/pending",)),
            id="pending-of-no-model-against-every-model",
        ),
        pytest.param(
            {"u1": pod("elsewhere", 3, node="unknown-node")},
            HeldOutsideQueue(total=3, unplaced=3, pods=("vision/elsewhere",)),
            id="on-a-node-not-known",
        ),
        pytest.param(
            {
                "d1": pod("serve-1", 6),
                "d2": pod("serve-2", 1, node="a100-0"),
                "j1": pod("t", 1, owner=JOB_UID),
            },
            HeldOutsideQueue(total=7, by_model={H100: 6, A100: 1}, pods=("vision/serve-1", "vision/serve-2")),
            id="per-model-and-kueues-left-out",
        ),
    ],
)
def test_held_outside_queue(pods: dict[str, PodFacts], expected: HeldOutsideQueue) -> None:
    assert held(pods) == expected


def test_before_the_nodes_are_listed_a_bound_pod_counts_against_every_model() -> None:
    assert held({"d1": pod("serve-1", 6)}, nodes=None) == HeldOutsideQueue(
        total=6, unplaced=6, pods=("vision/serve-1",)
    )


def test_gpus_allocated_to_a_pods_claims_count() -> None:
    devices = (AllocatedDevices(model=H100, count=2, gpus=2),)
    claimed = held({"c1": pod("claims", 0)}, allocations={"c1": devices})
    assert (claimed.total, claimed.by_model) == (2, {H100: 2})


def tenant(**gpu: Any) -> Tenant:
    pools = [
        {"name": "h100", "nodeSelector": {"nvidia.com/gpu.product": H100}},
        {"name": "any", "nodeSelector": {"labgate.io/node-pool": "any"}},
    ]
    return Tenant.from_object(
        {
            "metadata": {"name": "vision"},
            "spec": {"members": {}, "gpu": gpu, "placement": {"nodePools": pools}},
        }
    )


@pytest.mark.parametrize(
    ("gpu", "taken", "expected"),
    [
        pytest.param(
            {"total": 8}, HeldOutsideQueue(total=6, by_model={H100: 6}), (2, 2), id="total-less-all"
        ),
        pytest.param(
            {"models": {H100: 8}},
            HeldOutsideQueue(total=6, by_model={H100: 6}),
            (2, UNLIMITED_GPUS),
            id="the-models-quota-less-its-own",
        ),
        pytest.param(
            {"models": {H100: 8}},
            HeldOutsideQueue(total=6, by_model={A100: 6}),
            (8, UNLIMITED_GPUS),
            id="another-model-takes-nothing-of-it",
        ),
        pytest.param(
            {"models": {H100: 8}}, HeldOutsideQueue(total=3, unplaced=3), (5, UNLIMITED_GPUS), id="unplaced"
        ),
        pytest.param(
            {"total": 10, "models": {H100: 8}},
            HeldOutsideQueue(total=5, by_model={A100: 5}),
            (5, 5),
            id="the-least-limit",
        ),
        pytest.param({"total": 8}, HeldOutsideQueue(total=12), (0, 0), id="never-below-0"),
        pytest.param({}, HeldOutsideQueue(total=12), (UNLIMITED_GPUS, UNLIMITED_GPUS), id="no-limit"),
        pytest.param({"total": 8}, NOTHING_HELD, (8, 8), id="nothing-held-the-whole-quota"),
    ],
)
def test_each_flavors_gpu_quota_is_what_the_pods_outside_kueue_leave(
    gpu: dict[str, Any], taken: HeldOutsideQueue, expected: tuple[int, int]
) -> None:
    t = tenant(**gpu)
    h100, any_pool = t.spec.placement.node_pools
    assert (gpu_quota(t, h100, taken), gpu_quota(t, any_pool, taken)) == expected
    flavors = cluster_queue(t, taken)["spec"]["resourceGroups"][0]["flavors"]
    assert [f["resources"][0]["nominalQuota"] for f in flavors] == [str(n) for n in expected]
