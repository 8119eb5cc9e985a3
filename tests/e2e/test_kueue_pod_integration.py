"""Kueue's pod integration beside labgate: GPU pods beyond the quota wait behind Kueue's gate.

The `kueue_pod_stack` cluster (tests/e2e/conftest.py) runs Kueue's pod, Deployment and StatefulSet
integrations, and its policies say so (queue.pod_integration), which the reconciler reads too: it
leaves out the `labgate-gpu` ResourceQuota of every Kueue-managed tenant's namespaces, which would
count the gated pods and refuse one beyond the free quota at CREATE ("exceeded quota") instead of
letting it queue. Kueue decides when a gated pod starts (it removes the gate), the ledger reserves
at that removal, and only Kueue may remove it (`queue-gate`).

Graded against what the cluster did: the scheduler's binding and the pods' gates as the API shows
them, the GPUs bound counted by tests/cluster_truth.py (no labgate code), Kueue's ClusterQueue
status.flavorsUsage, and the Tenant's status.gpu.used. At every poll the bound GPUs and Kueue's
usage stay within the quota; once settled the three are the same number.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from devcluster.stack import LabgateStack
from tests.e2e.conftest import TenantFactory, TenantUnderTest
from tests.e2e.test_kueue import IMAGE, _json, eventually, failed_creates, tenant_with_pool
from tests.e2e.test_kueue_one_count import apps_workload, bound_gpus_in, kueue_gpus, labgate_gpus

pytestmark = [pytest.mark.kueue, pytest.mark.cluster, pytest.mark.timeout(420)]

QUOTA = 4
GATE = "kueue.x-k8s.io/admission"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def gpu_pod(name: str, *, gpus: int) -> dict[str, Any]:
    """A bare pod asking `gpus` GPUs that names the tenant's LocalQueue."""
    container = {
        "name": "main",
        "image": IMAGE,
        "command": ["python", "train.py"],
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: "default"}},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }


def is_gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in pod["spec"].get("schedulingGates") or [])


def is_bound(pod: dict[str, Any]) -> bool:
    """Bound by the scheduler, its gate gone (as the API shows the pod)."""
    return bool(pod["spec"].get("nodeName")) and not is_gated(pod)


def pod(stack: LabgateStack, ns: str, name: str) -> dict[str, Any]:
    return _json(stack, f"pod/{name}", "-n", ns)


class Counts:
    """The tenant's GPUs as the cluster holds them, checked within the quota at every look."""

    def __init__(self, stack: LabgateStack, tenant: TenantUnderTest):
        self.stack, self.tenant = stack, tenant
        self.looks = 0

    def bound(self) -> int:
        truth = bound_gpus_in(self.stack, self.tenant.namespace)
        kueue = kueue_gpus(self.stack, self.tenant.name)
        self.looks += 1
        assert truth <= QUOTA, f"{truth} GPUs bound, quota {QUOTA}"
        assert kueue <= QUOTA, f"Kueue holds {kueue} GPUs admitted, quota {QUOTA}"
        return truth

    def settled_at(self, gpus: int) -> Callable[[], bool]:
        """Bound GPUs, Kueue's usage and labgate's Tenant status all `gpus`."""

        def check() -> bool:
            truth = self.bound()
            return (
                truth == gpus
                and kueue_gpus(self.stack, self.tenant.name) == gpus
                and labgate_gpus(self.stack, self.tenant.name) == gpus
            )

        return check


def no_gpu_backstop(stack: LabgateStack, ns: str) -> bool:
    names = [q["metadata"]["name"] for q in _json(stack, "resourcequotas", "-n", ns)["items"]]
    return "labgate-gpu" not in names


def test_a_bare_gpu_pod_beyond_the_quota_waits_behind_kueues_gate_and_binds_when_one_ends(
    kueue_pod_stack: LabgateStack, kueue_pod_tenants: TenantFactory
) -> None:
    stack = kueue_pod_stack
    # One node of 8 GPUs: the node has room beyond the quota, so only the queue keeps the third out.
    tenant = tenant_with_pool(stack, kueue_pod_tenants, nodes=1, quota=QUOTA)
    ns = tenant.namespace
    counts = Counts(stack, tenant)
    for name in ("first", "second"):
        created = tenant.researcher.apply(gpu_pod(name, gpus=2), ns)
        assert created.returncode == 0, created.stderr
    eventually(
        lambda: counts.bound() >= 0 and all(is_bound(pod(stack, ns, n)) for n in ("first", "second")),
        what="Kueue removed both pods' gates and the scheduler bound them",
    )
    # Beyond the quota: not refused at CREATE, it waits in the queue behind the gate.
    created = tenant.researcher.apply(gpu_pod("third", gpus=2), ns)
    assert created.returncode == 0, f"the queued pod was refused at CREATE: {created.stderr}"
    assert "exceeded quota" not in created.stderr, created.stderr
    # Held for a while, look after look (a count of looks, not a deadline: a slow machine looks less
    # often, never fewer times).
    for _ in range(12):
        waiting = pod(stack, ns, "third")
        assert is_gated(waiting), "the pod beyond the quota lost its gate"
        assert not waiting["spec"].get("nodeName"), "the pod beyond the quota was bound"
        counts.bound()
        time.sleep(0.5)
    eventually(counts.settled_at(QUOTA), what=f"bound, Kueue's and labgate's GPUs all {QUOTA}")

    # The researcher cannot let it out: only Kueue removes its gate.
    gates = pod(stack, ns, "third")["spec"]["schedulingGates"]
    index = next(i for i, g in enumerate(gates) if g["name"] == GATE)
    patch = json.dumps([{"op": "remove", "path": f"/spec/schedulingGates/{index}"}])
    removed = tenant.researcher.kubectl("patch", "pod/third", "-n", ns, "--type=json", "-p", patch)
    assert removed.returncode != 0, removed.stdout
    assert f'[queue-gate] Pod "third" removes scheduling gate {GATE}' in removed.stderr, removed.stderr
    assert is_gated(pod(stack, ns, "third"))

    # One running pod ends: Kueue admits the waiting one, removes its gate, and it is bound.
    deleted = tenant.researcher.kubectl("delete", "pod/first", "-n", ns, "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    eventually(
        lambda: counts.bound() >= 0 and is_bound(pod(stack, ns, "third")),
        what="Kueue removed the waiting pod's gate and the scheduler bound it",
    )
    eventually(counts.settled_at(QUOTA), what=f"bound, Kueue's and labgate's GPUs all {QUOTA} again")
    assert failed_creates(stack, ns) == []
    assert counts.looks > 10
    assert no_gpu_backstop(stack, ns), "labgate-gpu in a namespace whose GPU pods Kueue gates"


def test_a_gpu_deployments_pods_queue_one_by_one_behind_a_running_pod(
    kueue_pod_stack: LabgateStack, kueue_pod_tenants: TenantFactory
) -> None:
    """Kueue's Deployment integration (v0.17: each pod its own Workload, through the pod integration):
    with a bare pod holding 2 of the 4 GPUs, three replicas of 1 GPU run two and queue one, with no
    FailedCreate; when the bare pod ends Kueue admits the third; scaling down frees the quota in
    every count. (A Deployment whose replicas together ask more than the quota is refused at apply,
    gpu-quota-unfit, as without Kueue: it could never run whole.)"""
    stack = kueue_pod_stack
    tenant = tenant_with_pool(stack, kueue_pod_tenants, nodes=1, quota=QUOTA)
    ns = tenant.namespace
    counts = Counts(stack, tenant)

    def replicas() -> list[dict[str, Any]]:
        live = _json(stack, "pods", "-n", ns, "-l", "app=serve")["items"]
        return [p for p in live if not p["metadata"].get("deletionTimestamp")]

    def bound_and_gated(bound: int, gated: int) -> Callable[[], bool]:
        def check() -> bool:
            counts.bound()
            live = replicas()
            return sum(map(is_bound, live)) == bound and sum(map(is_gated, live)) == gated

        return check

    created = tenant.researcher.apply(gpu_pod("holder", gpus=2), ns)
    assert created.returncode == 0, created.stderr
    eventually(lambda: counts.bound() >= 0 and is_bound(pod(stack, ns, "holder")), what="holder bound")
    created = tenant.researcher.apply(apps_workload("Deployment", "serve", replicas=3, gpus=1), ns)
    assert created.returncode == 0, created.stderr
    eventually(bound_and_gated(2, 1), what="two replicas bound, the third waiting behind the gate")
    eventually(counts.settled_at(QUOTA), what=f"bound, Kueue's and labgate's GPUs all {QUOTA}")
    deleted = tenant.researcher.kubectl("delete", "pod/holder", "-n", ns, "--wait=false")
    assert deleted.returncode == 0, deleted.stderr
    eventually(bound_and_gated(3, 0), what="Kueue admitted the waiting replica and it is bound")
    eventually(counts.settled_at(3), what="bound, Kueue's and labgate's GPUs all 3")
    scaled = tenant.researcher.kubectl("scale", "deployment/serve", "--replicas=1", "-n", ns)
    assert scaled.returncode == 0, scaled.stderr
    eventually(bound_and_gated(1, 0), what="one replica left, bound")
    eventually(counts.settled_at(1), what="bound, Kueue's and labgate's GPUs all 1")
    assert failed_creates(stack, ns) == []
