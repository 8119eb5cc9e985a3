"""Kueue beside labgate: gangs wait whole, Jobs beyond the free quota create no pod, tenants in a
cohort borrow idle quota and the owner reclaims it.

The `kueue_stack` cluster (tests/e2e/conftest.py): kube-scheduler, every controller, KWOK, Kueue out
of cluster with its webhooks by URL, and the reconciler provisioning each tenant's queues
(rbac/queues.py). Each test adds node pools of its own. The truth is what the scheduler binds
(tests/cluster_truth.py, independent of labgate's code), checked at every poll.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from devcluster.nodes import NodePool, tenant_placement
from devcluster.stack import LabgateStack
from tests.cluster_truth import effective_gpu_request, holds_gpus
from tests.e2e.conftest import TenantFactory, TenantUnderTest

pytestmark = [pytest.mark.kueue, pytest.mark.cluster, pytest.mark.timeout(420)]

IMAGE = "registry.lab.example/research/trainer:v1"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def _json(stack: LabgateStack, *args: str) -> dict[str, Any]:
    return dict(json.loads(stack.admin_kubectl("get", *args, "-o", "json")))


def eventually(check: Callable[[], bool], *, what: str, timeout: float = 90.0, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f}s: {what}")
        time.sleep(every)


def gpu_job(name: str, *, pods: int, gpus: int) -> dict[str, Any]:
    """An Indexed Job of `pods` pods (all at once: parallelism == completions) of `gpus` GPUs each."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completionMode": "Indexed",
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": IMAGE,
                            "command": ["python", "train.py"],
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                }
            },
        },
    }


def job_pods(stack: LabgateStack, namespace: str, job: str) -> list[dict[str, Any]]:
    return list(_json(stack, "pods", "-n", namespace, "-l", f"{JOB_NAME_LABEL}={job}")["items"])


def bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName") and holds_gpus(p)]


def bound_gpus(stack: LabgateStack, namespace: str) -> int:
    pods = _json(stack, "pods", "-n", namespace)["items"]
    return sum(effective_gpu_request(p["spec"]).get("nvidia.com/gpu", 0) for p in bound(pods))


def failed_creates(stack: LabgateStack, namespace: str) -> list[str]:
    events = _json(stack, "events", "-n", namespace, "--field-selector", "reason=FailedCreate")["items"]
    return [str(e.get("message")) for e in events]


def job_workload(stack: LabgateStack, namespace: str, job: str) -> dict[str, Any] | None:
    for workload in _json(stack, "workloads.kueue.x-k8s.io", "-n", namespace)["items"]:
        owners = workload["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
            return dict(workload)
    return None


def has_condition(obj: dict[str, Any] | None, kind: str) -> bool:
    conditions = (obj or {}).get("status", {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def tenant_with_pool(
    stack: LabgateStack,
    tenants: TenantFactory,
    *,
    nodes: int,
    quota: int,
    spec_extra: dict[str, Any] | None = None,
) -> TenantUnderTest:
    """A tenant with a spot pool of its own (`nodes` nodes of 8 H100) and `quota` GPUs, its queue ready."""
    name = f"t-{uuid.uuid4().hex[:6]}"
    pool = NodePool(name=f"{name}-h100", tenant=name, spot=True, nodes=nodes, gpu_product="H100", gpus=8)
    assert stack.kwok is not None
    stack.kwok.add_pools([pool])
    made = tenants.create(
        name=name,
        spec_extra={
            "gpu": {"total": quota},
            "placement": tenant_placement([pool], name),
            **(spec_extra or {}),
        },
    )
    wait_for_queue(stack, made)
    return made


def wait_for_queue(stack: LabgateStack, tenant: TenantUnderTest) -> None:
    """The reconciler made the tenant's ClusterQueue (Kueue reports it Active) and LocalQueue."""
    eventually(
        lambda: has_condition(_json(stack, f"clusterqueue.kueue.x-k8s.io/{tenant.name}"), "Active"),
        what=f"ClusterQueue {tenant.name} Active",
    )
    stack.admin_kubectl("get", "localqueue.kueue.x-k8s.io/default", "-n", tenant.namespace)


def run(tenant: TenantUnderTest, manifest: dict[str, Any]) -> None:
    result = tenant.researcher.apply(manifest, tenant.namespace)
    assert result.returncode == 0, result.stderr


def test_a_gang_waits_whole_while_gpus_are_busy_and_binds_whole_when_they_free(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory
) -> None:
    stack = kueue_stack
    tenant = tenant_with_pool(stack, kueue_tenants, nodes=4, quota=32)
    ns = tenant.namespace
    run(tenant, gpu_job("busy", pods=1, gpus=8))
    eventually(lambda: len(bound(job_pods(stack, ns, "busy"))) == 1, what="the busy Job's pod bound")

    run(tenant, gpu_job("gang", pods=4, gpus=8))
    eventually(lambda: job_workload(stack, ns, "gang") is not None, what="the gang's Workload")
    # Queued whole: suspended, no pod, no FailedCreate, and the researcher sees it on the Tenant.
    eventually(
        lambda: _json(stack, f"tenant/{tenant.name}")["status"]["gpu"].get("queuedGpus") == 32,
        what="the Tenant status shows 32 GPUs queued",
    )
    shown = tenant.researcher.kubectl("get", "tenant", tenant.name)
    assert shown.returncode == 0, shown.stderr
    assert "QUEUED GPUS" in shown.stdout, shown.stdout
    assert " 32 " in shown.stdout.splitlines()[1], shown.stdout
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert job_pods(stack, ns, "gang") == [], "a pod of the queued gang was created"
        assert _json(stack, "job/gang", "-n", ns)["spec"]["suspend"] is True
        assert bound_gpus(stack, ns) <= 32
        time.sleep(0.5)
    assert failed_creates(stack, ns) == []
    assert not has_condition(job_workload(stack, ns, "gang"), "QuotaReserved")

    stack.admin_kubectl(
        "delete", "job/busy", "-n", ns, "--cascade=foreground", "--wait=true", "--timeout=60s"
    )
    seen_bound = 0

    def whole() -> bool:
        nonlocal seen_bound
        pods = job_pods(stack, ns, "gang")
        count = len(bound(pods))
        assert count >= seen_bound, f"gang pods unbound: {seen_bound} -> {count}"
        seen_bound = count
        unschedulable = [
            p["metadata"]["name"]
            for p in pods
            if any(
                c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in p.get("status", {}).get("conditions") or []
            )
        ]
        assert unschedulable == [], f"a partial gang: {count} bound, unschedulable {unschedulable}"
        assert bound_gpus(stack, ns) <= 32
        return count == 4

    eventually(whole, what="the 4 x 8 gang bound whole")
    assert failed_creates(stack, ns) == []
    assert has_condition(job_workload(stack, ns, "gang"), "QuotaReserved")


def test_a_job_beyond_the_free_quota_creates_no_pod_until_it_fits(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory
) -> None:
    stack = kueue_stack
    tenant = tenant_with_pool(stack, kueue_tenants, nodes=13, quota=100)
    ns = tenant.namespace
    run(tenant, gpu_job("busy", pods=1, gpus=8))
    eventually(lambda: len(bound(job_pods(stack, ns, "busy"))) == 1, what="the busy Job's pod bound")
    run(tenant, gpu_job("sweep", pods=100, gpus=1))
    eventually(lambda: job_workload(stack, ns, "sweep") is not None, what="the sweep's Workload")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert job_pods(stack, ns, "sweep") == []
        time.sleep(0.5)
    assert failed_creates(stack, ns) == []

    stack.admin_kubectl(
        "delete", "job/busy", "-n", ns, "--cascade=foreground", "--wait=true", "--timeout=60s"
    )

    def all_bound() -> bool:
        assert bound_gpus(stack, ns) <= 100, "bound GPUs over the tenant's quota"
        return len(bound(job_pods(stack, ns, "sweep"))) == 100

    eventually(all_bound, what="the 100 pods bound", timeout=240, every=1.0)
    assert failed_creates(stack, ns) == []


def test_in_a_cohort_the_owner_reclaims_idle_quota_by_preempting_only_the_borrower(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory
) -> None:
    stack = kueue_stack
    suffix = uuid.uuid4().hex[:6]
    cohort = f"lab-{suffix}"
    # A pool both tenants run on (kept for neither), 16 GPUs: 8 of each tenant's quota.
    pool = NodePool(name=f"shared-{suffix}", nodes=2, gpu_product="H100", gpus=8)
    assert stack.kwok is not None
    stack.kwok.add_pools([pool])
    placement = {"nodePools": [pool.tenant_pool()]}
    owner = kueue_tenants.create(
        name=f"own-{suffix}",
        spec_extra={"gpu": {"total": 8}, "placement": placement, "queue": {"cohort": cohort}},
    )
    borrower = kueue_tenants.create(
        name=f"bor-{suffix}",
        spec_extra={
            "gpu": {"total": 8, "overQuota": "preemptible"},
            "placement": placement,
            "queue": {"cohort": cohort},
        },
    )
    wait_for_queue(stack, owner)
    wait_for_queue(stack, borrower)

    # The owner's quota is idle: the borrower runs a Job on its own 8 GPUs, and a second one beyond its
    # quota (its pods are preemptible, labgate admits them) that Kueue admits on the owner's idle 8.
    for job in ("own-quota", "borrowed"):
        run(borrower, gpu_job(job, pods=1, gpus=8))

        def is_bound(job: str = job) -> bool:
            return len(bound(job_pods(stack, borrower.namespace, job))) == 1

        eventually(is_bound, what=f"the borrower's Job {job} bound")
    assert bound_gpus(stack, borrower.namespace) == 16
    # The owner asks for its own 8: Kueue preempts the borrowing workload, and the owner's runs.
    run(owner, gpu_job("mine", pods=1, gpus=8))
    eventually(
        lambda: len(bound(job_pods(stack, owner.namespace, "mine"))) == 1,
        what="the owner's Job bound on its reclaimed quota",
        timeout=120,
    )
    # Only what was borrowed went: the borrower keeps its own 8, one of its two Jobs waits again
    # (suspended, whole); the owner's in-quota workload is never preempted for it.
    eventually(lambda: bound_gpus(stack, borrower.namespace) == 8, what="the borrower back to its 8 GPUs")
    reserved = [
        has_condition(job_workload(stack, borrower.namespace, j), "QuotaReserved")
        for j in ("own-quota", "borrowed")
    ]
    assert sorted(reserved) == [False, True], reserved
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        assert len(bound(job_pods(stack, owner.namespace, "mine"))) == 1
        assert bound_gpus(stack, borrower.namespace) == 8
        time.sleep(0.5)
    assert has_condition(job_workload(stack, owner.namespace, "mine"), "QuotaReserved")


def warning_text(stderr: str, rule: str) -> str:
    """The warning of `rule` as kubectl printed it, its lines (each under 120 characters) joined."""
    lines = [line.removeprefix("Warning: ") for line in stderr.splitlines() if f"[{rule}]" in line]
    assert all(len(line) < 120 for line in lines), lines
    return " ".join(line.split("] ", 1)[1].removeprefix("... ") for line in lines)


def test_kubectl_apply_says_where_a_job_waits_and_why(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory
) -> None:
    """Issue 20: a queued Job is created suspended; `kubectl apply` says in which LocalQueue, what it
    asks, what the tenant uses, whether it fits now or waits whole, and what is queued ahead."""
    stack = kueue_stack
    tenant = tenant_with_pool(stack, kueue_tenants, nodes=2, quota=16)
    ns = tenant.namespace

    fits = tenant.researcher.apply(gpu_job("busy", pods=1, gpus=8), ns)
    assert fits.returncode == 0, fits.stderr
    said = warning_text(fits.stderr, "queue-wait")
    assert said == (
        f'Job "busy" is queued in LocalQueue {ns}/default: it runs 1 pod × 8 GPUs = 8; tenant '  # noqa: RUF001 - the message's own sign
        f'"{tenant.name}" uses 0 of 16 GPUs, so it fits now and starts once Kueue admits it. '
        f"Fix: none, it starts by itself (watch: kubectl get workloads -n {ns})"
    ), fits.stderr
    eventually(lambda: len(bound(job_pods(stack, ns, "busy"))) == 1, what="the busy Job's pod bound")

    waits = tenant.researcher.apply(gpu_job("gang", pods=2, gpus=8), ns)
    assert waits.returncode == 0, waits.stderr
    assert warning_text(waits.stderr, "queue-wait") == (
        f'Job "gang" waits in LocalQueue {ns}/default: it runs 2 pods × 8 GPUs = 16; tenant '  # noqa: RUF001 - the message's own sign
        f'"{tenant.name}" uses 8 of 16 GPUs, so it waits whole, no pod started, until 16 GPUs are '
        f"free (8 now). Fix: none, it starts by itself (watch: kubectl get workloads -n {ns})"
    ), waits.stderr
    eventually(
        lambda: _json(stack, f"tenant/{tenant.name}")["status"]["gpu"].get("queuedGpus") == 16,
        what="the Tenant status shows the gang's 16 GPUs queued",
    )
    assert job_pods(stack, ns, "gang") == []

    # The next one (a server-side dry run: nothing is created) is told what waits ahead of it, once
    # the webhook has seen the Tenant's status.
    def told_what_is_ahead() -> bool:
        result = tenant.researcher.kubectl(
            "apply",
            "--dry-run=server",
            "-n",
            ns,
            "-f",
            "-",
            stdin=json.dumps(gpu_job("next", pods=2, gpus=8)),
        )
        assert result.returncode == 0, result.stderr
        return "; queued ahead: 1 workload asking 16 GPUs. Fix:" in warning_text(result.stderr, "queue-wait")

    eventually(told_what_is_ahead, what="the warning names the gang queued ahead", timeout=30, every=1.0)
