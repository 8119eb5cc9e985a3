"""One count across a tenant's pools: Kueue admits at most the Tenant's spec.gpu.total over all its
flavors, not that total on each.

A tenant with two pools of one GPU model each (8 H100 on spot nodes, 8 A100 on reserved nodes, as
examples/tenants.yaml's team-a) and a total of 8, no per-model quota: each pool's flavor may hold 8,
and without a cap across flavors Kueue admits a Job of 8 on each, whose second Job's pods the quota
ledger then refuses (a FailedCreate loop). With Kueue's resource transformation (every
nvidia.com/gpu also asks one labgate.io/gpu-total, devcluster/kueue.py) and the ClusterQueue's second
resource group (rbac/queues.py), the second Job waits whole, suspended, until the first is gone. The
pair: a tenant whose model quotas sum to its total runs on both pools at once. The truth is what the
scheduler binds (tests/cluster_truth.py, no code of labgate's), checked at every poll.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from devcluster.nodes import NodePool, tenant_placement
from devcluster.stack import LabgateStack
from tests.e2e.conftest import TenantFactory, TenantUnderTest
from tests.e2e.test_kueue import (
    _json,
    bound,
    bound_gpus,
    eventually,
    failed_creates,
    gpu_job,
    has_condition,
    job_pods,
    job_workload,
    run,
    wait_for_queue,
)
from tests.e2e.test_kueue_one_count import kueue_gpus

pytestmark = [pytest.mark.kueue, pytest.mark.cluster, pytest.mark.timeout(420)]

CAPACITY_ANNOTATION = "labgate.io/capacity"
TOTAL_RESOURCE = "labgate.io/gpu-total"


def tenant_with_two_pools(
    stack: LabgateStack, tenants: TenantFactory, *, gpu: dict[str, Any]
) -> TenantUnderTest:
    """A tenant with a spot pool of one node of 8 H100 and a reserved (on-demand) pool of one node of
    8 A100, both its own, on-demand allowed; `gpu`: its spec.gpu."""
    name = f"t-{uuid.uuid4().hex[:6]}"
    pools = [
        NodePool(name=f"{name}-spot", tenant=name, spot=True, nodes=1, gpu_product="H100", gpus=8),
        NodePool(name=f"{name}-reserved", tenant=name, spot=False, nodes=1, gpu_product="A100", gpus=8),
    ]
    assert stack.kwok is not None
    stack.kwok.add_pools(pools)
    made = tenants.create(
        name=name,
        spec_extra={"gpu": gpu, "placement": tenant_placement(pools, name, allow_on_demand=True)},
    )
    wait_for_queue(stack, made)
    return made


def job_on(name: str, *, model: str, gpus: int, on_demand: bool = False) -> dict[str, Any]:
    """A Job of one pod asking `gpus` GPUs of `model`; labgate places it on the tenant's spot pool of
    that model, or on its on-demand one where the pod asks on-demand capacity."""
    job = gpu_job(name, pods=1, gpus=gpus)
    template = job["spec"]["template"]
    template["spec"]["nodeSelector"] = {"nvidia.com/gpu.product": model}
    if on_demand:
        template["metadata"] = {"annotations": {CAPACITY_ANNOTATION: "on-demand"}}
    return job


def pending_message(workload: dict[str, Any] | None) -> str:
    """What Kueue says of a workload it tried and could not admit ("" before it tried)."""
    for condition in (workload or {}).get("status", {}).get("conditions") or []:
        if condition.get("type") == "QuotaReserved" and condition.get("status") == "False":
            return str(condition.get("message", ""))
    return ""


def total_usage(stack: LabgateStack, tenant: str) -> int:
    """The ClusterQueue's TOTAL_RESOURCE in use (status.flavorsUsage, as the API serves it)."""
    queue = _json(stack, f"clusterqueue.kueue.x-k8s.io/{tenant}")
    return sum(
        int(r.get("total", 0))
        for flavor in queue.get("status", {}).get("flavorsUsage") or []
        for r in flavor.get("resources") or []
        if r.get("name") == TOTAL_RESOURCE
    )


def within_total(stack: LabgateStack, tenant: TenantUnderTest, total: int) -> None:
    """At this poll: the scheduler bound at most `total` GPUs in the tenant, and Kueue holds at most
    `total` admitted over all its flavors; no pod failed to be created."""
    truth = bound_gpus(stack, tenant.namespace)
    assert truth <= total, f"{truth} GPUs bound, over the tenant's total {total}"
    held = kueue_gpus(stack, tenant.name)
    assert held <= total, f"Kueue admitted {held} GPUs over all flavors, over the total {total}"
    assert failed_creates(stack, tenant.namespace) == [], "a pod failed to be created"


def test_kueue_admits_the_tenants_total_across_its_pools_and_the_next_job_waits_whole(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory
) -> None:
    stack = kueue_stack
    tenant = tenant_with_two_pools(stack, kueue_tenants, gpu={"total": 8})
    ns = tenant.namespace
    run(tenant, job_on("spot", model="H100", gpus=8))
    eventually(lambda: len(bound(job_pods(stack, ns, "spot"))) == 1, what="the spot Job's pod bound")
    run(tenant, job_on("reserved", model="A100", gpus=8, on_demand=True))

    def is_held_back() -> bool:
        within_total(stack, tenant, 8)
        workload = job_workload(stack, ns, "reserved")
        assert not has_condition(workload, "QuotaReserved"), "Kueue admitted 8 more GPUs beyond the total"
        return TOTAL_RESOURCE in pending_message(workload)

    eventually(is_held_back, what=f"Kueue holding the second Job back for {TOTAL_RESOURCE}")
    # Held back whole, and it stays so: suspended, no pod, within the total at every poll.
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        within_total(stack, tenant, 8)
        assert job_pods(stack, ns, "reserved") == [], "a pod of the held-back Job was created"
        assert not has_condition(job_workload(stack, ns, "reserved"), "QuotaReserved")
        time.sleep(0.5)

    stack.admin_kubectl(
        "delete", "job/spot", "-n", ns, "--cascade=foreground", "--wait=true", "--timeout=60s"
    )

    def second_bound() -> bool:
        within_total(stack, tenant, 8)
        return len(bound(job_pods(stack, ns, "reserved"))) == 1

    eventually(second_bound, what="the second Job admitted and bound once the first is gone")
    assert bound_gpus(stack, ns) == 8
    nodes = [p["spec"]["nodeName"] for p in bound(job_pods(stack, ns, "reserved"))]
    assert nodes == [f"{tenant.name}-reserved-0"], nodes
    # What docs/infra.md says to check: the total's flavor holds what the pools' flavors hold.
    eventually(lambda: total_usage(stack, tenant.name) == 8, what=f"{TOTAL_RESOURCE} in use 8")


def test_a_tenant_whose_model_quotas_sum_to_its_total_uses_both_pools_at_once(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory
) -> None:
    stack = kueue_stack
    tenant = tenant_with_two_pools(stack, kueue_tenants, gpu={"total": 8, "models": {"H100": 4, "A100": 4}})
    ns = tenant.namespace
    run(tenant, job_on("spot", model="H100", gpus=4))
    run(tenant, job_on("reserved", model="A100", gpus=4, on_demand=True))

    def both_bound() -> bool:
        within_total(stack, tenant, 8)
        return all(len(bound(job_pods(stack, ns, job))) == 1 for job in ("spot", "reserved"))

    eventually(both_bound, what="a Job bound on each pool at once")
    assert bound_gpus(stack, ns) == 8
    # Kueue writes the ClusterQueue's usage after it admits: the status follows the binding.
    eventually(
        lambda: kueue_gpus(stack, tenant.name) == 8 and total_usage(stack, tenant.name) == 8,
        what=f"the ClusterQueue's GPUs and {TOTAL_RESOURCE} in use 8",
    )
