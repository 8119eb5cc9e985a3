"""The escape matrix where Kueue manages the tenants (issue 20): the queue cannot be skipped.

Every attempt goes through the real kubectl as a researcher or a tenant admin, on CREATE and UPDATE,
and is paired with the legitimate action it must not break: a Job that names no queue is put in the
tenant's LocalQueue `default` and runs when Kueue admits it; a researcher reads their queue and
Workloads; suspending one's own Job is fine; Kueue itself starts what it admits; GPU work that a
bare pod would run outside any queue is admitted as a Job. Kueue's scheduling gate on bare pods (with
its pod integration) is covered by the Rego tests (policies/labgate/rules/queue). Then a burst of
gangs through two webhook replicas: Kueue and the quota ledger hold one quota and agree (no pod of an
admitted workload refused, no pod of an unadmitted one created).

The `kueue_stack` cluster (tests/e2e/conftest.py) runs Kueue with the admin's kubeconfig, which its
policies name as Kueue's controller (config queue.kueue_users).
"""

from __future__ import annotations

import json
import subprocess
import uuid
from typing import Any

import pytest

from devcluster.stack import LabgateStack
from tests.cluster_truth import effective_gpu_request
from tests.e2e.conftest import Researcher, TenantFactory, TenantUnderTest
from tests.e2e.test_kueue import (
    JOB_NAME_LABEL,
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
    tenant_with_pool,
)

pytestmark = [pytest.mark.kueue, pytest.mark.cluster, pytest.mark.timeout(420)]

IMAGE = "registry.lab.example/research/trainer:v1"

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def refused(result: subprocess.CompletedProcess[str], rule: str) -> None:
    assert result.returncode != 0, f"admitted, expected [{rule}]: {result.stdout}"
    assert f"[{rule}]" in result.stderr, result.stderr


def forbidden(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode != 0, f"RBAC allowed it: {result.stdout}"
    assert "forbidden" in result.stderr.lower(), result.stderr


def admitted(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stderr


def patch(actor: Researcher, ns: str, target: str, body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return actor.kubectl("patch", target, "-n", ns, "--type=merge", "-p", json.dumps(body))


def job_object(stack: LabgateStack, ns: str, name: str) -> dict[str, Any]:
    return _json(stack, f"job/{name}", "-n", ns)


def test_a_job_naming_no_queue_waits_in_default_and_runs_and_its_researcher_reads_the_queue(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory
) -> None:
    stack = kueue_stack
    tenant = tenant_with_pool(stack, kueue_tenants, nodes=1, quota=8)
    ns = tenant.namespace
    job = gpu_job("plain", pods=1, gpus=8)
    job["spec"]["suspend"] = False  # created running: labgate queues it anyway
    run(tenant, job)
    assert job_object(stack, ns, "plain")["metadata"]["labels"][QUEUE_LABEL] == "default"
    eventually(
        lambda: len(bound(job_pods(stack, ns, "plain"))) == 1, what="the queued Job admitted and bound"
    )
    assert has_condition(job_workload(stack, ns, "plain"), "QuotaReserved")
    for what in ("localqueue/default", "workloads.kueue.x-k8s.io"):
        shown = tenant.researcher.kubectl("get", what, "-n", ns)
        admitted(shown)
    assert "default" in tenant.researcher.kubectl("get", "localqueues", "-n", ns).stdout


@pytest.fixture
def waiting(kueue_stack: LabgateStack, kueue_tenants: TenantFactory) -> TenantUnderTest:
    """A tenant of 8 GPUs whose Job `busy` holds them all, and Job `waits` queued behind it."""
    stack = kueue_stack
    tenant = tenant_with_pool(stack, kueue_tenants, nodes=1, quota=8)
    ns = tenant.namespace
    run(tenant, gpu_job("busy", pods=1, gpus=8))
    eventually(lambda: len(bound(job_pods(stack, ns, "busy"))) == 1, what="the busy Job's pod bound")
    run(tenant, gpu_job("waits", pods=1, gpus=8))
    eventually(lambda: job_workload(stack, ns, "waits") is not None, what="the waiting Job's Workload")
    assert job_object(stack, ns, "waits")["spec"]["suspend"] is True
    return tenant


@pytest.mark.parametrize("who", ["researcher", "admin"])
def test_the_queue_cannot_be_skipped_on_create_or_update(
    kueue_stack: LabgateStack, waiting: TenantUnderTest, who: str
) -> None:
    stack, ns = kueue_stack, waiting.namespace
    actor = waiting.researcher if who == "researcher" else waiting.admin

    # CREATE: another queue is refused; the same Job with no queue is admitted (into default).
    elsewhere = gpu_job("elsewhere", pods=1, gpus=8)
    elsewhere["metadata"]["labels"] = {QUEUE_LABEL: "other-tenant-queue"}
    refused(actor.apply(elsewhere, ns), "queue-name")
    admitted(actor.apply(gpu_job(f"again-{who}", pods=1, gpus=8), ns))

    # UPDATE of the waiting Job: unsuspend, change or drop its queue, move its pods.
    refused(patch(actor, ns, "job/waits", {"spec": {"suspend": False}}), "queue-unsuspend")
    refused(
        actor.kubectl("label", "job/waits", "-n", ns, f"{QUEUE_LABEL}=other", "--overwrite"), "queue-change"
    )
    # Dropping the label: Kueue's own webhook refuses it too ("queue-name must not be empty"), and
    # the apiserver reports whichever of the two denials it has first.
    dropped = actor.kubectl("label", "job/waits", "-n", ns, f"{QUEUE_LABEL}-")
    assert dropped.returncode != 0, dropped.stdout
    assert "[queue-change]" in dropped.stderr or "queue-name must not be empty" in dropped.stderr, (
        dropped.stderr
    )
    selector = {"spec": {"template": {"spec": {"nodeSelector": {"labgate.io/node-pool": "elsewhere"}}}}}
    refused(patch(actor, ns, "job/waits", selector), "queue-placement")
    waits = job_object(stack, ns, "waits")
    assert waits["spec"]["suspend"] is True
    assert waits["metadata"]["labels"][QUEUE_LABEL] == "default"
    assert job_pods(stack, ns, "waits") == []

    # The legitimate UPDATE beside them: a label of one's own on the waiting Job.
    admitted(actor.kubectl("label", "job/waits", "-n", ns, "purpose=ablation", "--overwrite"))


def test_only_kueue_starts_what_it_admits_and_members_suspend_or_delete_their_own_jobs(
    kueue_stack: LabgateStack, waiting: TenantUnderTest
) -> None:
    stack, ns = kueue_stack, waiting.namespace
    refused(patch(waiting.researcher, ns, "job/waits", {"spec": {"suspend": False}}), "queue-unsuspend")
    # The researcher suspends the running Job: labgate admits it (Kueue, which owns the admitted
    # Workload, may start it again). Deleting it frees its GPUs, and Kueue (the one writer the queue
    # rules exempt, for spec.suspend and the flavor's node selector) starts the waiting one.
    admitted(patch(waiting.researcher, ns, "job/busy", {"spec": {"suspend": True}}))
    deleted = waiting.researcher.kubectl(
        "delete", "job/busy", "-n", ns, "--cascade=foreground", "--wait=true", "--timeout=60s"
    )
    admitted(deleted)
    eventually(lambda: len(bound(job_pods(stack, ns, "waits"))) == 1, what="Kueue started the waiting Job")
    assert job_object(stack, ns, "waits")["spec"]["suspend"] is False
    assert bound_gpus(stack, ns) <= 8


def _gpu_pod(name: str, owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    container = {"name": "main", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    metadata: dict[str, Any] = {"name": name, **({"ownerReferences": owners} if owners else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [container]}}


@pytest.mark.parametrize("who", ["researcher", "admin"])
def test_a_bare_gpu_pod_has_no_queue_and_the_same_work_as_a_job_queues(
    kueue_stack: LabgateStack, waiting: TenantUnderTest, who: str
) -> None:
    """The stack's Kueue has no pod integration (config queue.pod_integration false): a bare GPU pod
    would skip the queue, so it is refused, also when it names an owner; the same work as a Job is
    admitted and waits in default."""
    stack, ns = kueue_stack, waiting.namespace
    actor = waiting.researcher if who == "researcher" else waiting.admin
    refused(actor.apply(_gpu_pod(f"solo-{who}"), ns), "queue-bare-pod")
    busy = job_object(stack, ns, "busy")
    owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "busy",
        "uid": busy["metadata"]["uid"],
        "controller": True,
    }
    refused(actor.apply(_gpu_pod(f"stowaway-{who}", [owner]), ns), "queue-bare-pod")
    admitted(actor.apply(gpu_job(f"as-a-job-{who}", pods=1, gpus=1), ns))
    queued = job_object(stack, ns, f"as-a-job-{who}")
    assert queued["metadata"]["labels"][QUEUE_LABEL] == "default"
    assert queued["spec"]["suspend"] is True


def _kueue_object(kind: str, ns: str) -> dict[str, Any]:
    api = "kueue.x-k8s.io/v1beta2"
    objects: dict[str, dict[str, Any]] = {
        "LocalQueue": {
            "apiVersion": api,
            "kind": kind,
            "metadata": {"name": "fast", "namespace": ns},
            "spec": {"clusterQueue": "someone-else"},
        },
        "WorkloadPriorityClass": {
            "apiVersion": api,
            "kind": kind,
            "metadata": {"name": f"vip-{ns}"},
            "value": 1000,
        },
        "ResourceFlavor": {"apiVersion": api, "kind": kind, "metadata": {"name": f"mine-{ns}"}, "spec": {}},
        "ClusterQueue": {
            "apiVersion": api,
            "kind": kind,
            "metadata": {"name": f"mine-{ns}"},
            "spec": {"namespaceSelector": {}, "resourceGroups": []},
        },
    }
    return objects[kind]


@pytest.mark.parametrize("who", ["researcher", "admin"])
def test_members_read_their_queue_and_write_nothing_of_kueue(
    kueue_stack: LabgateStack, waiting: TenantUnderTest, who: str
) -> None:
    ns = waiting.namespace
    actor = waiting.researcher if who == "researcher" else waiting.admin
    admitted(actor.kubectl("get", "localqueue/default", "-n", ns))
    admitted(actor.kubectl("get", f"clusterqueue.kueue.x-k8s.io/{waiting.name}"))
    forbidden(actor.kubectl("get", "clusterqueue.kueue.x-k8s.io/someone-else"))
    for kind in ("LocalQueue", "WorkloadPriorityClass", "ResourceFlavor", "ClusterQueue"):
        forbidden(actor.kubectl("create", "-f", "-", stdin=json.dumps(_kueue_object(kind, ns))))
    workload = job_workload(kueue_stack, ns, "waits")
    assert workload is not None
    name = workload["metadata"]["name"]
    forbidden(patch(actor, ns, f"workloads.kueue.x-k8s.io/{name}", {"spec": {"active": False}}))
    forbidden(actor.kubectl("delete", f"workloads.kueue.x-k8s.io/{name}", "-n", ns))
    body = json.dumps({"spec": {"stopPolicy": "Hold"}})
    forbidden(
        actor.kubectl("patch", f"clusterqueue.kueue.x-k8s.io/{waiting.name}", "--type=merge", "-p", body)
    )


def test_a_kueue_priority_above_the_tenants_ceiling_is_refused(
    kueue_stack: LabgateStack, waiting: TenantUnderTest
) -> None:
    job = gpu_job("urgent", pods=1, gpus=1)
    job["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "urgent"}
    refused(waiting.researcher.apply(job, waiting.namespace), "queue-priority")


def test_a_listed_workload_priority_class_is_judged_by_its_value(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory
) -> None:
    """Issue 20: a WorkloadPriorityClass the Tenant lists is refused when its value is above the
    tenant's priority ceiling (the webhook watches Kueue's classes: LABGATE_KUEUE), as a PriorityClass
    is; one at the ceiling is admitted."""
    suffix = uuid.uuid4().hex[:6]
    hot, calm = f"hot-{suffix}", f"calm-{suffix}"
    for name, value in ((hot, 1000), (calm, 0)):
        wpc = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": name},
        }
        kueue_stack.admin_kubectl("create", "-f", "-", stdin=json.dumps({**wpc, "value": value}))
    try:
        tenant = kueue_tenants.create(
            spec_extra={"gpu": {"total": 8}, "scheduling": {"priorityClasses": [hot, calm]}}
        )
        urgent = gpu_job("urgent", pods=1, gpus=1)
        urgent["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": hot}

        def refused_by_value() -> bool:  # once the webhook's watch has the class (milliseconds)
            dry = tenant.researcher.kubectl(
                "create", "--dry-run=server", "-n", tenant.namespace, "-f", "-", stdin=json.dumps(urgent)
            )
            return dry.returncode != 0 and "[queue-priority]" in dry.stderr

        eventually(
            refused_by_value, what="the WorkloadPriorityClass's value reaches the policies", timeout=30
        )
        result = tenant.researcher.apply(urgent, tenant.namespace)
        refused(result, "queue-priority")
        assert f'priority 1000, above tenant "{tenant.name}"\'s ceiling of 0' in result.stderr, result.stderr
        calm_job = gpu_job("calm", pods=1, gpus=1)
        calm_job["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": calm}
        admitted(tenant.researcher.apply(calm_job, tenant.namespace))
    finally:
        kueue_stack.admin_kubectl(
            "delete", "workloadpriorityclass.kueue.x-k8s.io", hot, calm, "--ignore-not-found"
        )


def _short_gang(name: str) -> dict[str, Any]:
    job = gpu_job(name, pods=2, gpus=4)
    job["spec"]["template"]["metadata"] = {"annotations": {"sim.labgate.io/run-for": "3s"}}
    return job


def test_a_burst_through_two_webhook_replicas_kueue_and_the_ledger_agree(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory
) -> None:
    """Six gangs of 2 x 4 GPUs (48) at once on a quota of 16: Kueue admits what fits, the ledger
    (two webhook replicas reserving in it) refuses none of their pods, no pod of a workload Kueue has
    not admitted exists, and the GPUs bound never pass the quota."""
    stack = kueue_stack
    assert len(stack.webhook_urls) == 2
    tenant = tenant_with_pool(stack, kueue_tenants, nodes=2, quota=16)
    ns = tenant.namespace
    names = [f"gang-{i}" for i in range(6)]
    burst = {"apiVersion": "v1", "kind": "List", "items": [_short_gang(n) for n in names]}
    admitted(tenant.researcher.kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(burst)))

    def agreed() -> bool:
        pods = _json(stack, "pods", "-n", ns)["items"]
        held = sum(effective_gpu_request(p["spec"]).get("nvidia.com/gpu", 0) for p in bound(pods))
        assert held <= 16, f"{held} GPUs bound over the quota of 16"
        admitted_jobs = {n for n in names if has_condition(job_workload(stack, ns, n), "QuotaReserved")} | {
            n for n in names if has_condition(job_workload(stack, ns, n), "Finished")
        }
        strays = [
            p["metadata"]["name"]
            for p in pods
            if p["metadata"]["labels"].get(JOB_NAME_LABEL) not in admitted_jobs
        ]
        assert strays == [], f"pods of workloads Kueue has not admitted: {strays}"
        assert failed_creates(stack, ns) == [], "the ledger refused a pod of an admitted workload"
        return all((job_object(stack, ns, n).get("status") or {}).get("succeeded") == 2 for n in names)

    eventually(agreed, what="all six gangs ran to completion within the quota", timeout=300, every=1.0)
