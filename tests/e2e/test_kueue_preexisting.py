"""Pods from before a tenant was Kueue-managed: Kueue's quota is what they leave free.

A tenant that Kueue does not manage yet (this module's stack leaves each Tenant to opt in with its
spec.queue, as `devcluster up --kueue` does) runs a GPU Deployment: 6 of its 8 GPUs, bound. It then
opts in. Kueue does not count the Deployment's pods, so the reconciler lowers the ClusterQueue's GPU
nominalQuota by what they hold (rbac/outside_queue.py): a Job asking 8 waits whole (suspended, no pod,
no FailedCreate), a Job asking 2 is admitted and runs; once the Deployment is scaled to 0 the quota is
8 again and the 8-GPU Job is admitted and bound. At every poll the GPUs the scheduler bound
(tests/cluster_truth.py, which shares no code with labgate) are within the quota of 8.

The stack is this module's own: `kueue_stack` makes every tenant Kueue's from the start, so no GPU
Deployment could run there before a switch.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from functools import partial

import pytest

from devcluster.stack import LabgateStack, NodeSimulation
from tests.e2e.conftest import TenantFactory, TenantUnderTest
from tests.e2e.test_kueue import (
    _json,
    bound,
    bound_gpus,
    eventually,
    gpu_job,
    has_condition,
    job_pods,
    job_workload,
    run,
    tenant_with_pool,
)
from tests.e2e.test_kueue_one_count import apps_workload, own_pool, running_on_nodes

pytestmark = [pytest.mark.kueue, pytest.mark.cluster, pytest.mark.timeout(600)]

QUOTA = 8


@pytest.fixture(scope="module")
def opt_in_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabgateStack]:
    """The `kueue_stack` shape, but each Tenant opts in to Kueue (its spec.queue) instead of every
    tenant being Kueue's: the only way a tenant's GPU Deployment runs before it is managed."""
    with LabgateStack(
        tmp_path_factory.mktemp("kueue-opt-in-cluster"),
        reconciler_lease_seconds=4,
        nodes=NodeSimulation(),
        kueue=True,
        kueue_every_tenant=False,
    ) as started:
        yield started


@pytest.fixture
def opt_in_tenants(opt_in_stack: LabgateStack) -> Iterator[TenantFactory]:
    factory = TenantFactory(opt_in_stack)
    try:
        yield factory
    finally:
        factory.cleanup()


def gpu_nominal_quota(stack: LabgateStack, tenant: str) -> dict[str, int]:
    """The ClusterQueue's nvidia.com/gpu nominalQuota per flavor, as the API serves it."""
    queue = _json(stack, f"clusterqueue.kueue.x-k8s.io/{tenant}")
    return {
        flavor["name"]: int(resource["nominalQuota"])
        for group in queue["spec"]["resourceGroups"]
        for flavor in group["flavors"]
        for resource in flavor["resources"]
        if resource["name"] == "nvidia.com/gpu"
    }


def failed_creates_of(stack: LabgateStack, ns: str, kind: str, name: str) -> list[str]:
    events = _json(stack, "events", "-n", ns, "--field-selector", "reason=FailedCreate")["items"]
    return [
        str(e.get("message"))
        for e in events
        if e.get("involvedObject", {}).get("kind") == kind and e.get("involvedObject", {}).get("name") == name
    ]


def within_quota(stack: LabgateStack, ns: str) -> None:
    truth = bound_gpus(stack, ns)
    assert truth <= QUOTA, f"{truth} GPUs bound in {ns}, quota {QUOTA}"


def polled(stack: LabgateStack, ns: str, check: Callable[[], bool]) -> Callable[[], bool]:
    """`check`, polled with the GPUs bound asserted within the quota at every poll."""

    def poll() -> bool:
        within_quota(stack, ns)
        return check()

    return poll


def test_pods_from_before_the_switch_are_counted_against_the_clusterqueue_until_they_end(
    opt_in_stack: LabgateStack, opt_in_tenants: TenantFactory
) -> None:
    stack = opt_in_stack
    tenant: TenantUnderTest = tenant_with_pool(stack, opt_in_tenants, nodes=1, quota=QUOTA)
    ns, flavor = tenant.namespace, f"{tenant.name}-h100"
    pool = own_pool(stack, tenant)
    assert gpu_nominal_quota(stack, tenant.name) == {flavor: QUOTA}

    # Not managed yet: a GPU Deployment is admitted and its 6 pods bind.
    run(tenant, apps_workload("Deployment", "serve", replicas=6, gpus=1, pool=pool))
    eventually(
        polled(stack, ns, partial(running_on_nodes, stack, ns, "serve", 6)),
        what="the Deployment's 6 pods bound",
    )
    # Kueue's quota is what they leave: 8 - 6.
    eventually(
        polled(stack, ns, lambda: gpu_nominal_quota(stack, tenant.name) == {flavor: 2}),
        what="the ClusterQueue's GPU nominalQuota lowered to 2",
    )

    # The tenant opts in to Kueue; its Deployment's pods keep running.
    stack.admin_kubectl(
        "patch", f"tenant/{tenant.name}", "--type=merge", "-p", json.dumps({"spec": {"queue": {}}})
    )
    run(tenant, gpu_job("whole", pods=1, gpus=8))
    eventually(lambda: job_workload(stack, ns, "whole") is not None, what="the 8-GPU Job's Workload")
    run(tenant, gpu_job("small", pods=1, gpus=2))
    eventually(
        polled(stack, ns, lambda: len(bound(job_pods(stack, ns, "small"))) == 1),
        what="the 2-GPU Job admitted and its pod bound",
    )
    assert has_condition(job_workload(stack, ns, "small"), "QuotaReserved")
    # The 8-GPU Job waits whole while the Deployment holds 6: suspended, no pod, no FailedCreate.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        within_quota(stack, ns)
        assert not has_condition(job_workload(stack, ns, "whole"), "QuotaReserved"), "Kueue admitted 8 of 2"
        assert _json(stack, "job/whole", "-n", ns)["spec"]["suspend"] is True
        assert job_pods(stack, ns, "whole") == []
        time.sleep(0.5)
    assert failed_creates_of(stack, ns, "Job", "whole") == []
    assert gpu_nominal_quota(stack, tenant.name) == {flavor: 2}

    # The small Job goes; the Deployment's pods still hold 6, so the 8-GPU Job still waits.
    stack.admin_kubectl(
        "delete", "job/small", "-n", ns, "--cascade=foreground", "--wait=true", "--timeout=60s"
    )
    assert not has_condition(job_workload(stack, ns, "whole"), "QuotaReserved")

    # Scaled to 0, the Deployment holds nothing: the quota is 8 again, and the Job is admitted whole.
    scaled = tenant.researcher.kubectl("scale", "deployment/serve", "--replicas=0", "-n", ns)
    assert scaled.returncode == 0, scaled.stderr
    eventually(
        polled(stack, ns, lambda: gpu_nominal_quota(stack, tenant.name) == {flavor: QUOTA}),
        what="the ClusterQueue's GPU nominalQuota back to 8",
    )
    eventually(
        polled(stack, ns, lambda: len(bound(job_pods(stack, ns, "whole"))) == 1),
        what="the 8-GPU Job admitted and its pod bound",
    )
    assert has_condition(job_workload(stack, ns, "whole"), "QuotaReserved")
    assert failed_creates_of(stack, ns, "Job", "whole") == []
    within_quota(stack, ns)
