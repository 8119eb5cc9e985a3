"""One count of a Kueue-managed tenant's GPUs: nothing asks GPUs outside Kueue.

The stack's Kueue queues Jobs only (no pod integration). A GPU Deployment, StatefulSet or ReplicaSet
would run pods Kueue does not count, so Kueue would admit Jobs whose pods the quota ledger then
refuses (a FailedCreate loop): they are refused at apply, as researcher and tenant admin, each paired
with the same kind without GPUs, admitted and running, and with a GPU Job, which Kueue admits and the
scheduler binds. After the mix, labgate's usage (the Tenant's status), Kueue's (the ClusterQueue's
status.flavorsUsage) and what the scheduler bound (tests/cluster_truth.py, which shares no code with
labgate) are the same GPUs, and no pod of any kind failed to be created.
"""

from __future__ import annotations

import json
import subprocess
from functools import partial
from typing import Any

import pytest

from devcluster.kueue import KUEUE_USER
from devcluster.stack import LabgateStack
from tests.cluster_truth import effective_gpu_request
from tests.e2e.conftest import Researcher, TenantFactory, TenantUnderTest
from tests.e2e.test_kueue import (
    IMAGE,
    _json,
    bound,
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

APPS_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")


def apps_workload(
    kind: str, name: str, *, replicas: int, gpus: int, pool: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A Deployment, StatefulSet or ReplicaSet of `replicas` pods asking `gpus` GPUs each (0: none),
    on `pool` (an entry of the Tenant's spec.placement.nodePools) when given: labgate places only GPU
    pods on the tenant's pool, and the test cluster has no other nodes."""
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    container = {
        "name": "main",
        "image": IMAGE,
        "command": ["python", "serve.py"],
        "resources": {"limits": limits},
    }
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [container]}},
    }
    if pool is not None:
        spec["template"]["spec"] |= {"nodeSelector": pool["nodeSelector"], "tolerations": pool["tolerations"]}
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def refused_outside_kueue(result: subprocess.CompletedProcess[str], rule: str, kind: str, name: str) -> None:
    assert result.returncode != 0, f"admitted, expected [{rule}]: {result.stdout}"
    assert f'[{rule}] {kind} "{name}" asks' in result.stderr, result.stderr
    assert 'waits in LocalQueue "default", which takes Jobs' in result.stderr, result.stderr


def own_pool(stack: LabgateStack, tenant: TenantUnderTest) -> dict[str, Any]:
    return dict(_json(stack, f"tenant/{tenant.name}")["spec"]["placement"]["nodePools"][0])


def pods_of(stack: LabgateStack, ns: str, app: str) -> list[dict[str, Any]]:
    return list(_json(stack, "pods", "-n", ns, "-l", f"app={app}")["items"])


def running_on_nodes(stack: LabgateStack, ns: str, app: str, count: int) -> bool:
    return sum(1 for p in pods_of(stack, ns, app) if p["spec"].get("nodeName")) == count


def kueue_gpus(stack: LabgateStack, tenant: str) -> int:
    """The GPUs the tenant's ClusterQueue holds admitted, over every flavor (status.flavorsUsage)."""
    queue = _json(stack, f"clusterqueue.kueue.x-k8s.io/{tenant}")
    return sum(
        int(r.get("total", 0))
        for flavor in queue.get("status", {}).get("flavorsUsage") or []
        for r in flavor.get("resources") or []
        if r.get("name") == "nvidia.com/gpu"
    )


def labgate_gpus(stack: LabgateStack, tenant: str) -> int | None:
    used = _json(stack, f"tenant/{tenant}").get("status", {}).get("gpu", {}).get("used")
    return None if used is None else int(used)


def bound_gpus_in(stack: LabgateStack, ns: str) -> int:
    pods = _json(stack, "pods", "-n", ns)["items"]
    return sum(sum(effective_gpu_request(p["spec"]).values()) for p in bound(pods))


@pytest.mark.parametrize("who", ["researcher", "admin"])
def test_gpu_work_outside_kueue_is_refused_and_the_same_kinds_without_gpus_run(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory, who: str
) -> None:
    stack = kueue_stack
    tenant = tenant_with_pool(stack, kueue_tenants, nodes=1, quota=8)
    ns = tenant.namespace
    actor: Researcher = tenant.researcher if who == "researcher" else tenant.admin
    for kind in APPS_KINDS:
        name = f"gpu-{kind.lower()}"
        refused_outside_kueue(
            actor.apply(apps_workload(kind, name, replicas=6, gpus=1), ns), "queue-unmanaged-kind", kind, name
        )
        cpu = f"cpu-{kind.lower()}"
        result = actor.apply(apps_workload(kind, cpu, replicas=1, gpus=0, pool=own_pool(stack, tenant)), ns)
        assert result.returncode == 0, result.stderr
    # A StatefulSet at 0 replicas asking GPUs is refused too: raising its replicas is a scale away.
    refused_outside_kueue(
        actor.apply(apps_workload("StatefulSet", "idle", replicas=0, gpus=1), ns),
        "queue-unmanaged-kind",
        "StatefulSet",
        "idle",
    )
    for kind in APPS_KINDS:
        app = f"cpu-{kind.lower()}"
        eventually(partial(running_on_nodes, stack, ns, app, 1), what=f"{app}'s pod bound")
    # An UPDATE that gives a template GPUs is refused; scaling down or deleting is not.
    refused_outside_kueue(
        actor.apply(
            apps_workload("Deployment", "cpu-deployment", replicas=1, gpus=1, pool=own_pool(stack, tenant)),
            ns,
        ),
        "queue-unmanaged-kind",
        "Deployment",
        "cpu-deployment",
    )
    scaled = actor.kubectl("scale", "deployment/cpu-deployment", "--replicas=0", "-n", ns)
    assert scaled.returncode == 0, scaled.stderr
    deleted = actor.kubectl("delete", "statefulset/cpu-statefulset", "-n", ns, "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    # DaemonSets are not in members' RBAC at all.
    daemonset = apps_workload("ReplicaSet", "agent", replicas=1, gpus=1)
    daemonset["kind"] = "DaemonSet"
    del daemonset["spec"]["replicas"]
    result = actor.apply(daemonset, ns)
    assert result.returncode != 0, result.stdout
    assert "forbidden" in result.stderr.lower(), result.stderr


def _owned_gpu_pod(name: str, owner: dict[str, Any] | None) -> dict[str, Any]:
    container = {"name": "main", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    metadata: dict[str, Any] = {"name": name, **({"ownerReferences": [owner]} if owner else {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": {"containers": [container]}}


def test_a_cluster_admins_gpu_pods_outside_kueue_are_refused_and_a_daemonset_gets_none(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory
) -> None:
    stack = kueue_stack
    tenant = tenant_with_pool(stack, kueue_tenants, nodes=1, quota=8)
    ns = tenant.namespace
    bare = stack.cluster_kubectl("apply", "-n", ns, "-f", "-", manifest=_owned_gpu_pod("bare", None))
    assert bare.returncode != 0, bare.stdout
    assert "[queue-bare-pod]" in bare.stderr, bare.stderr
    cpu_rs = apps_workload("ReplicaSet", "holder", replicas=0, gpus=0)
    stack.admin_kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(cpu_rs))
    rs = _json(stack, "replicaset/holder", "-n", ns)
    owner = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "name": "holder",
        "uid": rs["metadata"]["uid"],
        "controller": True,
    }
    owned = stack.cluster_kubectl("apply", "-n", ns, "-f", "-", manifest=_owned_gpu_pod("owned", owner))
    assert owned.returncode != 0, owned.stdout
    assert '[queue-unmanaged-pod] Pod "owned" of ReplicaSet "holder"' in owned.stderr, owned.stderr
    # A DaemonSet reaches labgate through its pods only: the controller's GPU pods are refused.
    daemonset = apps_workload("ReplicaSet", "agent", replicas=1, gpus=1)
    daemonset["kind"] = "DaemonSet"
    del daemonset["spec"]["replicas"]
    daemonset["spec"]["template"]["spec"]["tolerations"] = [{"operator": "Exists"}]
    stack.admin_kubectl("apply", "-n", ns, "-f", "-", stdin=json.dumps(daemonset))
    eventually(
        lambda: any("[queue-unmanaged-pod]" in m for m in failed_creates(stack, ns)),
        what="the DaemonSet's GPU pod refused",
    )
    assert bound_gpus_in(stack, ns) == 0
    stack.admin_kubectl("delete", "daemonset/agent", "-n", ns)


def test_after_a_mixed_workload_labgate_kueue_and_the_scheduler_count_the_same_gpus(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory
) -> None:
    stack = kueue_stack
    tenant: TenantUnderTest = tenant_with_pool(stack, kueue_tenants, nodes=1, quota=8)
    ns = tenant.namespace
    refused_outside_kueue(
        tenant.researcher.apply(apps_workload("Deployment", "serve", replicas=6, gpus=1), ns),
        "queue-unmanaged-kind",
        "Deployment",
        "serve",
    )
    run(tenant, apps_workload("Deployment", "notebook", replicas=2, gpus=0, pool=own_pool(stack, tenant)))
    run(tenant, gpu_job("train", pods=2, gpus=4))
    eventually(lambda: len(bound(job_pods(stack, ns, "train"))) == 2, what="the GPU Job's pods bound")
    assert has_condition(job_workload(stack, ns, "train"), "QuotaReserved")
    eventually(lambda: running_on_nodes(stack, ns, "notebook", 2), what="the notebook's pods bound")
    # A second Job waits whole: no pod of it exists while the first holds the quota.
    run(tenant, gpu_job("next", pods=1, gpus=8))
    eventually(lambda: job_workload(stack, ns, "next") is not None, what="the second Job's Workload")
    assert job_pods(stack, ns, "next") == []

    def same_gpus() -> bool:
        truth = bound_gpus_in(stack, ns)
        return (
            truth == 8
            and kueue_gpus(stack, tenant.name) == truth
            and labgate_gpus(stack, tenant.name) == truth
        )

    eventually(same_gpus, what="labgate's usage, Kueue's and the scheduler's bound GPUs all 8")
    assert failed_creates(stack, ns) == [], "a pod failed to be created"


def test_a_kueue_stack_lets_kueue_start_what_it_admits_with_no_call_of_its_own(
    kueue_stack: LabgateStack, kueue_tenants: TenantFactory
) -> None:
    """The kueue_stack fixture makes LabgateStack(kueue=True) and nothing else: the stack serves
    policies that trust Kueue (its own copy), so labgate admits Kueue's unsuspending of a Job."""
    stack = kueue_stack
    queue_config = json.loads((stack.policy_dir / "labgate" / "config" / "queue" / "data.json").read_text())
    assert stack.policy_dir == stack.workdir / "policies-kueue"
    assert queue_config["kueue_users"] == [KUEUE_USER]
    tenant = tenant_with_pool(stack, kueue_tenants, nodes=1, quota=8)
    run(tenant, gpu_job("started", pods=1, gpus=1))
    eventually(
        lambda: len(bound(job_pods(stack, tenant.namespace, "started"))) == 1,
        what="Kueue unsuspended the Job and its pod bound",
    )
    job = _json(stack, "job/started", "-n", tenant.namespace)
    assert job["spec"]["suspend"] is False
