"""A tenant's Kueue queues as the reconciler computes them (rbac/queues.py, pure)."""

from __future__ import annotations

from typing import Any

import pytest

from labgate.core.tenant import Tenant
from rbac.outside_queue import NOTHING_HELD, HeldOutsideQueue
from rbac.queues import (
    ANY_NODE_FLAVOR,
    GPU_TOTAL_RESOURCE,
    TOTAL_FLAVOR,
    UNLIMITED_GPUS,
    cluster_queue,
    gpu_total_transformation,
    queued,
    shared_flavors,
    tenant_queues,
    workload_gpus,
)

SPOT = {
    "name": "h100-spot",
    "nodeSelector": {"labgate.io/node-pool": "h100-spot", "nvidia.com/gpu.product": "H100"},
    "tolerations": [{"key": "labgate.io/spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
    "spot": True,
}
ON_DEMAND = {
    "name": "a100-ondemand",
    "nodeSelector": {"labgate.io/node-pool": "a100-ondemand", "nvidia.com/gpu.product": "A100"},
}


def tenant(name: str = "vision", **spec: Any) -> Tenant:
    return Tenant.from_object({"metadata": {"name": name}, "spec": {"members": {}, **spec}})


def flavors_of(queue: dict[str, Any]) -> list[dict[str, Any]]:
    return list(queue["spec"]["resourceGroups"][0]["flavors"])


def gpu_resource(flavor: dict[str, Any]) -> dict[str, Any]:
    return next(r for r in flavor["resources"] if r["name"] == "nvidia.com/gpu")


def test_each_pool_is_a_flavor_with_its_labels_and_tolerations() -> None:
    flavors = shared_flavors([tenant(placement={"nodePools": [SPOT, ON_DEMAND], "allowOnDemand": True})])
    by_name = {f["metadata"]["name"]: f for f in flavors}
    assert sorted(by_name) == ["a100-ondemand", "h100-spot", TOTAL_FLAVOR]
    assert by_name["h100-spot"]["spec"] == {
        "nodeLabels": {"labgate.io/node-pool": "h100-spot", "nvidia.com/gpu.product": "H100"},
        "tolerations": [
            {"key": "labgate.io/spot", "operator": "Equal", "value": "true", "effect": "NoSchedule"}
        ],
    }
    assert by_name["a100-ondemand"]["spec"] == {"nodeLabels": ON_DEMAND["nodeSelector"]}
    assert all(f["apiVersion"] == "kueue.x-k8s.io/v1beta2" for f in flavors)
    # Shared by the tenants that name the pool: no tenant label, so one tenant's removal keeps it.
    assert all("labgate.io/tenant" not in f["metadata"]["labels"] for f in flavors)


def test_a_pool_named_by_two_tenants_is_one_flavor_and_goes_with_the_last() -> None:
    both = [tenant("a", placement={"nodePools": [SPOT]}), tenant("b", placement={"nodePools": [SPOT]})]
    assert [f["metadata"]["name"] for f in shared_flavors(both)] == ["h100-spot", TOTAL_FLAVOR]
    assert shared_flavors([]) == []


def test_the_totals_flavor_places_nothing_and_lives_while_a_tenant_does() -> None:
    flavors = shared_flavors([tenant(placement={"nodePools": [SPOT]})])
    total = next(f for f in flavors if f["metadata"]["name"] == TOTAL_FLAVOR)
    # No node labels, no tolerations: Kueue adds nothing of it to the pods it admits.
    assert total["spec"] == {}
    assert total["metadata"]["labels"]["labgate.io/flavor"] == "true"
    assert shared_flavors([]) == []


def test_a_tenant_without_pools_queues_on_the_any_node_flavor() -> None:
    queue = cluster_queue(tenant(gpu={"total": 4}))
    assert [f["name"] for f in flavors_of(queue)] == [ANY_NODE_FLAVOR]
    assert shared_flavors([tenant()])[0]["spec"] == {}


def test_spot_first_and_on_demand_only_where_allowed() -> None:
    pools = [ON_DEMAND, SPOT]
    assert [f["name"] for f in flavors_of(cluster_queue(tenant(placement={"nodePools": pools})))] == [
        "h100-spot"
    ]
    allowed = tenant(placement={"nodePools": pools, "allowOnDemand": True})
    assert [f["name"] for f in flavors_of(cluster_queue(allowed))] == ["h100-spot", "a100-ondemand"]
    # Only on-demand pools: those, whatever allowOnDemand says (there is no spot to prefer).
    only = tenant(placement={"nodePools": [ON_DEMAND]})
    assert [f["name"] for f in flavors_of(cluster_queue(only))] == ["a100-ondemand"]


def test_the_nominal_gpu_quota_is_the_models_limit_or_the_total() -> None:
    queue = cluster_queue(
        tenant(
            gpu={"total": 16, "models": {"H100": 8}},
            placement={"nodePools": [SPOT, ON_DEMAND], "allowOnDemand": True},
        )
    )
    quotas = {f["name"]: gpu_resource(f)["nominalQuota"] for f in flavors_of(queue)}
    assert quotas == {"h100-spot": "8", "a100-ondemand": "16"}
    assert queue["spec"]["resourceGroups"][0]["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory"]
    assert queue["spec"]["namespaceSelector"] == {"matchLabels": {"labgate.io/tenant": "vision"}}
    assert "cohortName" not in queue["spec"]
    assert "borrowingLimit" not in gpu_resource(flavors_of(queue)[0])


TWO_POOLS = {"nodePools": [SPOT, ON_DEMAND], "allowOnDemand": True}


def total_group(queue: dict[str, Any]) -> dict[str, Any]:
    groups = queue["spec"]["resourceGroups"]
    assert len(groups) == 2, groups
    return dict(groups[1])


@pytest.mark.parametrize(
    ("gpu", "held", "per_pool", "total"),
    [
        pytest.param({"total": 16}, NOTHING_HELD, ("16", "16"), "16", id="two-pools-no-model-quota"),
        pytest.param(
            {"total": 16, "models": {"H100": 12, "A100": 12}},
            NOTHING_HELD,
            ("12", "12"),
            "16",
            id="model-quotas-summing-over-the-total",
        ),
        pytest.param(
            {"total": 8, "models": {"H100": 4, "A100": 4}},
            NOTHING_HELD,
            ("4", "4"),
            "8",
            id="model-quotas-summing-to-the-total",
        ),
        pytest.param(
            {"total": 16},
            HeldOutsideQueue(total=6, by_model={"H100": 6}),
            ("10", "10"),
            "10",
            id="less-what-pods-outside-kueue-hold",
        ),
        pytest.param({}, NOTHING_HELD, (str(UNLIMITED_GPUS),) * 2, str(UNLIMITED_GPUS), id="no-limit"),
    ],
)
def test_the_sum_over_a_tenants_pools_is_capped_by_its_total(
    gpu: dict[str, Any], held: HeldOutsideQueue, per_pool: tuple[str, str], total: str
) -> None:
    """Kueue has no cap across the flavors of one group: each pool's flavor may hold the total, and a
    second group over GPU_TOTAL_RESOURCE alone, on one flavor, holds the sum to the total."""
    queue = cluster_queue(tenant(gpu=gpu, placement=TWO_POOLS), held)
    assert tuple(gpu_resource(f)["nominalQuota"] for f in flavors_of(queue)) == per_pool
    assert total_group(queue) == {
        "coveredResources": [GPU_TOTAL_RESOURCE],
        "flavors": [
            {"name": TOTAL_FLAVOR, "resources": [{"name": GPU_TOTAL_RESOURCE, "nominalQuota": total}]}
        ],
    }


def test_a_tenant_without_pools_has_the_cap_too() -> None:
    # Kueue refuses a workload asking a resource its ClusterQueue does not cover: every queue has it.
    queue = cluster_queue(tenant(gpu={"total": 4}))
    assert total_group(queue)["flavors"][0]["resources"][0]["nominalQuota"] == "4"


def test_kueue_adds_one_of_the_total_per_gpu_and_keeps_the_gpus() -> None:
    assert gpu_total_transformation() == {
        "input": "nvidia.com/gpu",
        "strategy": "Retain",
        "outputs": {GPU_TOTAL_RESOURCE: "1"},
    }


def test_the_pools_model_is_read_under_the_configured_label() -> None:
    amd = {
        "name": "mi300",
        "nodeSelector": {"labgate.io/node-pool": "mi300", "amd.com/gpu.product": "MI300X"},
    }
    t = tenant(gpu={"total": 16, "models": {"MI300X": 4}}, placement={"nodePools": [amd]})
    assert (
        gpu_resource(flavors_of(cluster_queue(t, model_label="amd.com/gpu.product"))[0])["nominalQuota"]
        == "4"
    )
    # Read under another label, the pool names no model: only the total applies.
    assert gpu_resource(flavors_of(cluster_queue(t))[0])["nominalQuota"] == "16"
    queues = tenant_queues(t, namespaces=["vision"], model_label="amd.com/gpu.product")
    assert gpu_resource(flavors_of(queues[0])[0])["nominalQuota"] == "4"


def test_in_a_cohort_only_preemptible_overflow_borrows_and_reclaim_preempts_only_borrowers() -> None:
    refusing = cluster_queue(tenant(gpu={"total": 8}, queue={"cohort": "lab", "lendingLimit": 4}))
    assert refusing["spec"]["cohortName"] == "lab"
    assert gpu_resource(flavors_of(refusing)[0]) == {
        "name": "nvidia.com/gpu",
        "nominalQuota": "8",
        "borrowingLimit": "0",
        "lendingLimit": "4",
    }
    borrowing = cluster_queue(
        tenant(gpu={"total": 8, "overQuota": "preemptible"}, queue={"cohort": "lab", "borrowingLimit": 16})
    )
    assert gpu_resource(flavors_of(borrowing)[0])["borrowingLimit"] == "16"
    # The total is borrowed and lent as the GPUs are: a refusing tenant borrows none of it either.
    assert total_group(refusing)["flavors"][0]["resources"][0] == {
        "name": GPU_TOTAL_RESOURCE,
        "nominalQuota": "8",
        "borrowingLimit": "0",
        "lendingLimit": "4",
    }
    assert total_group(borrowing)["flavors"][0]["resources"][0]["borrowingLimit"] == "16"
    unlimited = cluster_queue(tenant(gpu={"total": 8, "overQuota": "preemptible"}, queue={"cohort": "lab"}))
    assert "borrowingLimit" not in gpu_resource(flavors_of(unlimited)[0])
    assert borrowing["spec"]["preemption"] == {
        "reclaimWithinCohort": "Any",
        "borrowWithinCohort": {"policy": "Never"},
        "withinClusterQueue": "LowerPriority",
    }


def test_every_namespace_gets_a_default_local_queue_of_the_tenants_cluster_queue() -> None:
    objects = tenant_queues(tenant(), namespaces=["vision", "vision-exp"])
    assert [(o["kind"], o["metadata"].get("namespace"), o["metadata"]["name"]) for o in objects] == [
        ("ClusterQueue", None, "vision"),
        ("LocalQueue", "vision", "default"),
        ("LocalQueue", "vision-exp", "default"),
    ]
    assert all(o["metadata"]["labels"]["labgate.io/tenant"] == "vision" for o in objects)
    assert objects[1]["spec"] == {"clusterQueue": "vision"}


def workload(count: int, gpus: str, *, admitted: bool = False, finished: bool = False) -> dict[str, Any]:
    conditions = []
    if admitted:
        conditions.append({"type": "QuotaReserved", "status": "True"})
    if finished:
        conditions.append({"type": "Finished", "status": "True"})
    container = {"name": "main", "resources": {"requests": {"nvidia.com/gpu": gpus, "cpu": "500m"}}}
    return {
        "spec": {
            "podSets": [{"name": "main", "count": count, "template": {"spec": {"containers": [container]}}}]
        },
        "status": {"conditions": conditions},
    }


def test_queued_counts_the_workloads_waiting_for_quota_and_their_gpus() -> None:
    assert workload_gpus(workload(4, "8")) == 32
    # Any quantity the apiserver writes (a float parse raised on "1k" and failed the tenant's status).
    assert (workload_gpus(workload(2, "1k")), workload_gpus(workload(1, "2000m"))) == (2000, 2)
    waiting = [workload(4, "8"), workload(1, "2")]
    others = [
        workload(1, "8", admitted=True),
        workload(2, "8", admitted=True, finished=True),
        workload(1, "1", finished=True),
    ]
    assert queued([*waiting, *others]) == (2, 34)
    assert queued([]) == (0, 0)
