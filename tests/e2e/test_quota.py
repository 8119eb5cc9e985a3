"""Tenant-wide GPU quota through the real apiserver: the ledger, races between webhook replicas,
release on deletion and completion, and refusal of Jobs that can never fit."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from devcluster.stack import LABGATE_NAMESPACE, LabgateStack
from labgate.core.tenant import TENANT_LABEL
from labgate.gpu_accounting.ledger import (
    LEDGER_MAX_BYTES,
    GpuAmount,
    Reservation,
    encode_reservations,
    encoded_size,
    ledger_name,
)
from labgate.gpu_accounting.settled_pods import SETTLED_LABEL
from tests.e2e.conftest import TenantFactory, TenantUnderTest
from tests.e2e.test_reconciler import eventually, get_json

pytestmark = pytest.mark.quota

SHARD_LABEL = "labgate.io/e2e-shard"


def gpu_pod(
    name: str, gpus: int, *, model: str | None = "h100", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "train",
                "image": "registry.lab.example/research/trainer:v1",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
            }
        ]
    }
    if model is not None:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": model}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
    }


def gpu_used(stack: LabgateStack, tenant: str) -> int | None:
    tenant_obj = get_json(stack, f"tenant/{tenant}")
    return None if tenant_obj is None else tenant_obj.get("status", {}).get("gpu", {}).get("used")


def second_namespace(stack: LabgateStack, tenants: TenantFactory, team: TenantUnderTest) -> str:
    """Give the tenant a second namespace, to show the quota is tenant-wide."""
    extra = f"{team.name}-b"
    tenant = get_json(stack, f"tenant/{team.name}")
    assert tenant is not None
    names = [*tenant["spec"]["namespaces"]["names"], extra]
    stack.admin_kubectl(
        "patch",
        "tenant",
        team.name,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"namespaces": {"names": names}}}),
    )
    tenants.created.append(("namespace", extra))
    # The reconciler creates it an instant later (kubectl wait would fail on a namespace not yet there).
    eventually(
        lambda: (get_json(stack, f"namespace/{extra}") or {}).get("status", {}).get("phase") == "Active",
        what="the second namespace is provisioned",
    )
    eventually(
        lambda: (
            team.researcher.kubectl("auth", "can-i", "create", "pods", "-n", extra).stdout.strip() == "yes"
        ),
        what="researchers may work in the second namespace",
    )
    return extra


def test_quota_is_tenant_wide_with_the_numbers_in_the_refusal(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 8}})
    other_namespace = second_namespace(stack, tenants, team)
    me = team.researcher
    assert me.apply(gpu_pod("first", 4, model=None), team.namespace).returncode == 0
    assert me.apply(gpu_pod("second", 2, model=None), other_namespace).returncode == 0
    refused = me.apply(gpu_pod("third", 4, model=None), other_namespace)
    assert refused.returncode == 1
    assert "[gpu-quota]" in refused.stderr
    assert 'Pod "third"' in refused.stderr
    assert f'tenant "{team.name}"' in refused.stderr
    assert "6 of 8" in refused.stderr, refused.stderr  # in use of the total, across both namespaces
    assert "Fix:" in refused.stderr
    eventually(lambda: gpu_used(stack, team.name) == 6, what="Tenant status shows 6 GPUs used")
    assert me.apply(gpu_pod("third", 2, model=None), other_namespace).returncode == 0


def test_quota_per_gpu_model(tenants: TenantFactory) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 16, "models": {"h100": 6, "a100": 8}}})
    me = team.researcher
    assert me.apply(gpu_pod("h1", 4), team.namespace).returncode == 0
    refused = me.apply(gpu_pod("h2", 3), team.namespace)
    assert refused.returncode == 1
    assert "[gpu-quota]" in refused.stderr
    assert "uses 4 of 6 h100 GPUs" in refused.stderr, refused.stderr
    assert me.apply(gpu_pod("a1", 3, model="a100"), team.namespace).returncode == 0


def test_a_model_the_tenant_has_no_quota_for_is_refused(tenants: TenantFactory) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 8, "models": {"h100": 8, "a100": 8}}})
    refused = team.researcher.apply(gpu_pod("b200", 1, model="b200"), team.namespace)
    assert refused.returncode == 1
    assert "[gpu-model-unknown]" in refused.stderr
    assert "h100" in refused.stderr
    assert "a100" in refused.stderr


def test_a_job_that_can_never_fit_is_refused_at_apply_time(tenants: TenantFactory) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 16}})
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "sweep"},
        "spec": {
            "parallelism": 64,
            "completions": 64,
            "template": {"spec": {**gpu_pod("x", 8)["spec"], "restartPolicy": "Never"}},
        },
    }
    refused = team.researcher.apply(job, team.namespace)
    assert refused.returncode == 1
    assert "[gpu-quota-unfit]" in refused.stderr
    assert re.search(r"64 pods? × 8 GPUs = 512", refused.stderr), refused.stderr  # noqa: RUF001
    job["spec"]["parallelism"] = 2
    assert team.researcher.apply(job, team.namespace).returncode == 0


def test_usage_is_released_when_pods_are_deleted_or_finish(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 4}})
    me = team.researcher
    for name in ("a", "b"):
        assert me.apply(gpu_pod(name, 2), team.namespace).returncode == 0
    assert me.apply(gpu_pod("c", 1), team.namespace).returncode == 1
    me.kubectl("delete", "pod", "a", "-n", team.namespace, "--wait=false")
    eventually(lambda: gpu_used(stack, team.name) == 2, what="deleted pod's GPUs released")
    assert me.apply(gpu_pod("c", 2), team.namespace).returncode == 0
    # The status is written at most every 2 s (issue 21): it shows c before b's finish is awaited.
    eventually(lambda: gpu_used(stack, team.name) == 4, what="c's GPUs shown")
    # A pod that finished (the kubelet would write this status) no longer holds its GPUs.
    stack.admin_kubectl(
        "patch",
        "pod",
        "b",
        "-n",
        team.namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"phase": "Succeeded"}}),
    )
    eventually(lambda: gpu_used(stack, team.name) == 2, what="finished pod's GPUs released")
    assert me.apply(gpu_pod("d", 2), team.namespace).returncode == 0


def ledger_data(stack: LabgateStack, tenant: str) -> dict[str, Any]:
    """The tenant's GPU ledger as stored: reservations and the settled pods' sum, decoded."""
    config_map = get_json(stack, "configmap", ledger_name(tenant), "-n", LABGATE_NAMESPACE)
    assert config_map is not None, "the tenant has a GPU ledger"
    data = config_map["data"]
    return {
        "reservations": json.loads(data["reservations"]),
        "settled": json.loads(data.get("settled", "{}")),
    }


def uid_of(stack: LabgateStack, key: str) -> str:
    """The uid of the live pod "<namespace>/<name>" (reservations and records are keyed by it)."""
    namespace, name = key.split("/", 1)
    pod = get_json(stack, "pod", name, "-n", namespace)
    assert pod is not None, f"pod {key} exists"
    return str(pod["metadata"]["uid"])


def settled_record(stack: LabgateStack, tenant: str, uid: str) -> Any:
    """The reconciler's record of one settled pod's GPUs (by the pod's uid), or None (a record is in
    whichever of the tenant's shards it was placed in)."""
    selector = f"{SETTLED_LABEL}=true,{TENANT_LABEL}={tenant}"
    shards = get_json(stack, "configmaps", "-l", selector, "-n", LABGATE_NAMESPACE) or {}
    for shard in shards.get("items", []):
        if uid in (records := json.loads(shard["data"]["pods"])):
            return records[uid]
    return None


def is_settled(stack: LabgateStack, tenant: str, key: str) -> bool:
    uid = uid_of(stack, key)
    return (
        uid not in ledger_data(stack, tenant)["reservations"]
        and settled_record(stack, tenant, uid) is not None
    )


def patch_reservations(stack: LabgateStack, tenant: str, encoded: str, tmp_path: Path) -> None:
    patch = tmp_path / "reservations.json"
    patch.write_text(json.dumps({"data": {"reservations": encoded}}))
    stack.admin_kubectl(
        "patch",
        "configmap",
        ledger_name(tenant),
        "-n",
        LABGATE_NAMESPACE,
        "--type=merge",
        f"--patch-file={patch}",
    )


def test_a_settled_pod_leaves_the_ledger_as_a_sum_and_its_record_goes_with_the_pod(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """The ledger every admission reads stays small: a pod that started is one record in the
    reconciler's own store and a part of one sum in the ledger."""
    team = tenants.create(spec_extra={"gpu": {"total": 4}})
    me = team.researcher
    assert me.apply(gpu_pod("p", 3), team.namespace).returncode == 0
    key = f"{team.namespace}/p"
    eventually(lambda: is_settled(stack, team.name, key), what="pod settled")
    uid = uid_of(stack, key)
    assert settled_record(stack, team.name, uid) == {"total": 3, "by_model": {"h100": 3}}
    assert ledger_data(stack, team.name) == {
        "reservations": {},
        "settled": {"total": 3, "by_model": {"h100": 3}},
    }
    refused = me.apply(gpu_pod("q", 2), team.namespace)
    assert refused.returncode == 1
    assert "[gpu-quota]" in refused.stderr, "the settled sum counts against the quota"
    me.kubectl("delete", "pod", "p", "-n", team.namespace, "--wait=false")
    eventually(lambda: settled_record(stack, team.name, uid) is None, what="record dropped with its pod")
    assert ledger_data(stack, team.name)["settled"]["total"] == 0
    assert me.apply(gpu_pod("q", 2), team.namespace).returncode == 0


def test_a_pod_behind_kueues_gate_holds_no_gpus_until_its_gate_is_removed(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """Issue 20: a pod waiting behind Kueue's admission gate cannot be scheduled, so it reserves
    nothing when created (it would wait in Kueue's queue, not be refused), and is judged against the
    quota and reserved when the gate is removed. Here in a tenant Kueue does not manage, where the
    researcher may remove the gate (where Kueue manages it only Kueue may: queue-gate): the ledger's
    rule is the same for every tenant. The gated pod is in a second namespace: Kubernetes' own
    ResourceQuota (labgate-gpu, a per-namespace backstop) counts gated pods too."""
    team = tenants.create(spec_extra={"gpu": {"total": 4}})
    me, ns = team.researcher, second_namespace(stack, tenants, team)
    assert me.apply(gpu_pod("held", 4), team.namespace).returncode == 0
    refused = me.apply(gpu_pod("plain", 4), ns)
    assert refused.returncode == 1, "without the gate, the quota is full"
    assert "[gpu-quota]" in refused.stderr

    gated = gpu_pod("waiting", 4)
    gated["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    created = me.apply(gated, ns)
    assert created.returncode == 0, created.stderr
    waiting_uid = uid_of(stack, f"{ns}/waiting")
    assert waiting_uid not in ledger_data(stack, team.name)["reservations"]
    # The settlement neither recounts it from its spec nor lists it as held by unscheduled pods.
    eventually(lambda: is_settled(stack, team.name, f"{team.namespace}/held"), what="the held pod settled")
    eventually(lambda: gpu_used(stack, team.name) == 4, what="the Tenant status shows 4 GPUs used")
    assert settled_record(stack, team.name, waiting_uid) is None
    status = (get_json(stack, f"tenant/{team.name}") or {})["status"]["gpu"]
    assert "waiting" not in (status.get("unscheduledPods") or []), status

    ungate = ["patch", "pod", "waiting", "-n", ns, "--type=json", "-p"]
    remove = json.dumps([{"op": "remove", "path": "/spec/schedulingGates"}])
    refused = me.kubectl(*ungate, remove)
    assert refused.returncode == 1, refused.stdout
    assert "[gpu-quota]" in refused.stderr
    assert "uses 4 of 4 h100 GPUs" in refused.stderr or "uses 4 of 4 GPUs" in refused.stderr, refused.stderr

    me.kubectl("delete", "pod", "held", "-n", team.namespace, "--wait=false")
    eventually(lambda: gpu_used(stack, team.name) == 0, what="the deleted pod's GPUs released")
    admitted = me.kubectl(*ungate, remove)
    assert admitted.returncode == 0, admitted.stderr
    eventually(lambda: is_settled(stack, team.name, f"{ns}/waiting"), what="the ungated pod settled")
    assert settled_record(stack, team.name, waiting_uid) == {"total": 4, "by_model": {"h100": 4}}
    eventually(lambda: gpu_used(stack, team.name) == 4, what="the Tenant status shows its 4 GPUs")
    refused = me.apply(gpu_pod("plain", 1), ns)
    assert refused.returncode == 1, "the ungated pod counts against the quota"


def test_a_reservation_read_after_its_pod_came_and_went_is_released_at_once(
    stack: LabgateStack, tenants: TenantFactory, tmp_path: Path
) -> None:
    """Watch streams are not ordered with each other: the reconciler may see a pod created and deleted
    before it sees the ledger write that reserved its GPUs. That reservation must not hold the GPUs
    until it expires; the pod's uid, its key, says its pod is gone."""
    team = tenants.create(spec_extra={"gpu": {"total": 2}})
    me = team.researcher
    assert me.apply(gpu_pod("gone", 2), team.namespace).returncode == 0
    key = f"{team.namespace}/gone"
    eventually(lambda: is_settled(stack, team.name, key), what="pod settled")
    pod = get_json(stack, "pod", "gone", "-n", team.namespace)
    assert pod is not None
    pod_uid = pod["metadata"]["uid"]
    stack.admin_kubectl("delete", "pod", "gone", "-n", team.namespace)
    eventually(lambda: gpu_used(stack, team.name) == 0, what="deleted pod's GPUs released")
    # Replay the webhook's write as the reconciler would read it late: unsettled, for the gone pod.
    late = Reservation(gpus=GpuAmount(total=2, by_model={"h100": 2}), expires=time.time() + 120, pod=key)
    patch_reservations(stack, team.name, encode_reservations({pod_uid: late}), tmp_path)
    # Well before the reservation would expire (two minutes here): the ledger change wakes the
    # reconciler (within a second here) and the gone uid releases the GPUs. The bound is loose for CI.
    eventually(
        lambda: pod_uid not in ledger_data(stack, team.name)["reservations"],
        what="late reservation released",
        timeout=45,
    )
    assert me.apply(gpu_pod("next", 2), team.namespace).returncode == 0


def test_a_full_gpu_ledger_refuses_with_a_clear_message_and_recovers(
    stack: LabgateStack, tenants: TenantFactory, tmp_path: Path
) -> None:
    """A ConfigMap holds 1 MiB. Settled pods are a sum, so only pods admitted and not yet settled
    (the reconciler settles them within seconds) take room; if the reconciler stops, they pile up.
    A tenant whose ledger cannot take one more gets a refusal that says so, and admits again once
    there is room."""
    team = tenants.create(spec_extra={"gpu": {"total": 8}})
    me = team.researcher
    assert me.apply(gpu_pod("before", 1), team.namespace).returncode == 0
    eventually(lambda: is_settled(stack, team.name, f"{team.namespace}/before"), what="pod settled")
    # Fill the ledger with unsettled zero-GPU reservations that stay until they expire, up to a few
    # bytes short of the limit in labgate's own encoding: no pod's reservation fits any more.
    filler = Reservation(gpus=GpuAmount(), expires=time.time() + 600)
    reservations: dict[str, Reservation] = {}
    size = len(encode_reservations(reservations))
    entry = encoded_size(f"{team.namespace}/filler-00000", filler) - 1  # less the braces, plus a comma
    while size + entry <= LEDGER_MAX_BYTES - 20:
        reservations[f"{team.namespace}/filler-{len(reservations):05d}"] = filler
        size += entry
    encoded = encode_reservations(reservations)
    assert LEDGER_MAX_BYTES - 20 - entry < len(encoded) <= LEDGER_MAX_BYTES - 20
    patch_reservations(stack, team.name, encoded, tmp_path)
    refused = me.apply(gpu_pod("after", 1), team.namespace)
    assert refused.returncode == 1
    assert "[gpu-ledger-full]" in refused.stderr, refused.stderr
    held = (
        f"tenant {team.name!r} has {len(reservations)} GPU pods admitted that labgate has not yet seen start"
    )
    assert held in refused.stderr
    assert "Fix: retry in a minute" in refused.stderr
    # Room again: the pod is admitted and counted with the settled one.
    patch_reservations(stack, team.name, "{}", tmp_path)
    eventually(lambda: me.apply(gpu_pod("after", 1), team.namespace).returncode == 0, what="admitted again")
    eventually(lambda: gpu_used(stack, team.name) == 2, what="both pods counted")


def test_a_ledger_edited_into_garbage_refuses_that_tenants_gpu_pods_clearly_and_no_others(
    stack: LabgateStack, tenants: TenantFactory, tmp_path: Path
) -> None:
    """Someone edits a tenant's ledger by hand and breaks it: that tenant's GPU pods are refused with a
    message naming the ConfigMap (never admitted against an unknown usage, never a bare webhook
    failure); other tenants are untouched; repairing it restores admissions."""
    team, other = (
        tenants.create(spec_extra={"gpu": {"total": 4}}),
        tenants.create(spec_extra={"gpu": {"total": 4}}),
    )
    assert team.researcher.apply(gpu_pod("before", 1), team.namespace).returncode == 0
    eventually(lambda: is_settled(stack, team.name, f"{team.namespace}/before"), what="pod settled")
    patch_reservations(stack, team.name, '{"oops": ', tmp_path)

    attempts: list[tuple[str, subprocess.CompletedProcess[str]]] = []

    def refused_for_the_ledger() -> bool:
        # A new name each time: until the webhook has seen the edit, a pod may still be admitted.
        name = f"after-{len(attempts)}"
        attempts.append((name, team.researcher.apply(gpu_pod(name, 1), team.namespace)))
        result = attempts[-1][1]
        return (
            result.returncode == 1 and f"ConfigMap {ledger_name(team.name)}) is unreadable" in result.stderr
        )

    eventually(refused_for_the_ledger, what="GPU pods refused while the ledger is unreadable")
    name, refused = attempts[-1]
    assert "[policy-engine-unavailable]" in refused.stderr
    assert "tell the infra team" in refused.stderr
    assert get_json(stack, "pod", name, "-n", team.namespace) is None
    assert other.researcher.apply(gpu_pod("fine", 1), other.namespace).returncode == 0
    patch_reservations(stack, team.name, "{}", tmp_path)
    eventually(
        lambda: team.researcher.apply(gpu_pod("repaired", 1), team.namespace).returncode == 0,
        what="admitted again once the ledger is repaired",
    )


def lease_holder(stack: LabgateStack) -> str | None:
    lease = get_json(stack, "lease/labgate-reconciler", "-n", LABGATE_NAMESPACE)
    return None if lease is None else lease["spec"].get("holderIdentity")


def test_a_new_reconciler_leader_carries_on_with_the_settled_pods(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """The settled pods' records outlive the leader that wrote them: after a takeover, a deleted pod's
    GPUs are still released and new pods are settled."""
    team = tenants.create(spec_extra={"gpu": {"total": 4}})
    me = team.researcher
    for name in ("a", "b"):
        assert me.apply(gpu_pod(name, 2), team.namespace).returncode == 0
    eventually(
        lambda: all(is_settled(stack, team.name, f"{team.namespace}/{name}") for name in ("a", "b")),
        what="a and b settled",
    )
    leader = next(p for p in stack.processes if p.name == "reconciler-0")
    assert lease_holder(stack) == "reconciler-0"
    standby = stack.start_reconciler(identity="gpu-standby")
    os.kill(leader.pid, signal.SIGSTOP)
    try:
        eventually(lambda: lease_holder(stack) == "gpu-standby", what="the standby holds the lease")
        me.kubectl("delete", "pod", "a", "-n", team.namespace, "--wait=false")
        eventually(lambda: gpu_used(stack, team.name) == 2, what="the new leader released a's GPUs")
        assert ledger_data(stack, team.name)["settled"] == {"total": 2, "by_model": {"h100": 2}}
        assert me.apply(gpu_pod("c", 2), team.namespace).returncode == 0
        eventually(
            lambda: is_settled(stack, team.name, f"{team.namespace}/c"), what="c settled by the new leader"
        )
        assert me.apply(gpu_pod("d", 1), team.namespace).returncode == 1, "the quota is exactly used"
    finally:
        os.kill(leader.pid, signal.SIGCONT)
        standby.stop()
    eventually(lambda: lease_holder(stack) == "reconciler-0", what="the first reconciler leads again")


@pytest.fixture
def two_replicas(stack: LabgateStack) -> Iterator[None]:
    """A second webhook replica; objects labelled shard=1 go to it, the rest to the first."""
    second = stack.start_webhook(opa_url=stack.opa_url)
    stack.register_webhook(stack.webhook_urls[0], second, shard_label=SHARD_LABEL)
    try:
        yield
    finally:
        stack.register_webhook(stack.webhook_urls[0])


@pytest.mark.usefixtures("two_replicas")
def test_concurrent_creations_through_two_replicas_never_exceed_the_quota(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    limit, simultaneous = 10, 50
    team = tenants.create(spec_extra={"gpu": {"total": limit}})

    # The researcher's own credentials, through the apiserver; a client library rather than 50
    # kubectl processes, so that the burst reaches the webhooks at once instead of load on the machine.
    researcher = kubernetes.config.new_client_from_config(config_file=str(team.researcher.kubeconfig))
    researcher.configuration.connection_pool_maxsize = simultaneous
    pods_api = kubernetes.client.CoreV1Api(researcher)

    def create(i: int) -> tuple[int, str]:
        """Create pod race-<i> through replica i % 2, retrying as a Job's controller would: a lost
        ledger race ([gpu-ledger-busy]), or a decision that missed its deadline under the burst
        (labgate's own, OPA's, or the apiserver's 3 s call timeout: failurePolicy Fail refuses).
        Each is a refusal, never an admission, and must leave no reservation behind."""
        pod = gpu_pod(f"race-{i}", 1, labels={SHARD_LABEL: str(i % 2)})
        retryable = (
            "[gpu-ledger-busy]",
            "no decision within",
            "no answer within",
            "context deadline exceeded",
        )
        for _ in range(5):
            try:
                pods_api.create_namespaced_pod(team.namespace, pod)
                return 0, ""
            except kubernetes.client.ApiException as refusal:
                message = str(refusal.body)
            if not any(reason in message for reason in retryable):
                break
        return 1, message

    # One pod through each replica first, so that both hold reservations whoever wins the race.
    first = [create(0), create(1)]
    assert [code for code, _ in first] == [0, 0], first
    with ThreadPoolExecutor(max_workers=simultaneous) as pool:
        results = first + list(pool.map(create, range(2, 2 + simultaneous)))
    admitted = [i for i, (code, _) in enumerate(results) if code == 0]
    refusals = [err for code, err in results if code != 0]
    assert len(admitted) == limit, f"{len(admitted)} admitted: {refusals[:3]}"
    odd = [err for err in refusals if "[gpu-quota]" not in err]
    assert odd == [], odd[:2]
    pods = get_json(stack, "pods", "-n", team.namespace)
    assert pods is not None
    assert len(pods["items"]) == limit
    eventually(lambda: gpu_used(stack, team.name) == limit, what="status shows the quota exactly used")
    # Capacity returns after deletions, and the boundary holds again.
    for i in admitted[:3]:
        team.researcher.kubectl("delete", "pod", f"race-{i}", "-n", team.namespace, "--wait=false")
    eventually(lambda: gpu_used(stack, team.name) == limit - 3, what="three GPUs released")
    with ThreadPoolExecutor(max_workers=10) as pool:
        again = list(pool.map(create, range(100, 110)))
    assert sum(1 for code, _ in again if code == 0) == 3, again


def pods_gpus(stack: LabgateStack, namespace: str) -> int:
    """The GPUs the pods that exist in `namespace` ask, from their specs (the test's own count)."""
    pods = get_json(stack, "pods", "-n", namespace)
    assert pods is not None
    return sum(
        int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
        for pod in pods["items"]
        if pod["status"].get("phase") not in ("Succeeded", "Failed")
        for c in pod["spec"]["containers"]
    )


@pytest.mark.usefixtures("two_replicas")
def test_a_deletion_the_api_finished_is_a_release_the_next_decision_sees(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """A researcher who deletes a running pod (kubectl waits until the API has removed it) and at once
    creates another is not refused by the count of the one that is gone, through either replica; and
    the quota still holds: with the pods that exist asking all of it, a further pod is refused, and
    two created at once in the room one deletion leaves are one admitted, one refused. (Each pod is
    deleted once the reconciler has settled it, as a pod that ran is: one created and deleted within
    the settlement's pace still counts as its reservation until the reconciler releases it.)"""
    limit = 4
    team = tenants.create(spec_extra={"gpu": {"total": limit}})
    me, namespace = team.researcher, team.namespace
    assert me.apply(gpu_pod("keep", 2), namespace).returncode == 0
    assert me.apply(gpu_pod("again", 2), namespace).returncode == 0
    refused = me.apply(gpu_pod("third", 1), namespace)
    assert refused.returncode == 1
    assert f"uses 4 of {limit} GPUs" in refused.stderr, refused.stderr

    def delete_again() -> None:
        eventually(lambda: ledger_data(stack, team.name)["reservations"] == {}, what="the pods settled")
        deleted = me.kubectl("delete", "pod", "again", "-n", namespace, "--wait=true", "--timeout=30s")
        assert deleted.returncode == 0, deleted.stderr

    for attempt in range(10):
        delete_again()
        created = me.apply(gpu_pod("again", 2, labels={SHARD_LABEL: str(attempt % 2)}), namespace)
        assert created.returncode == 0, f"attempt {attempt}: {created.stderr}"
        assert pods_gpus(stack, namespace) == limit
    delete_again()
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(
            pool.map(
                lambda i: me.apply(gpu_pod(f"both-{i}", 2, labels={SHARD_LABEL: str(i)}), namespace), (0, 1)
            )
        )
    assert sorted(r.returncode for r in results) == [0, 1], [r.stderr for r in results]
    assert "[gpu-quota]" in next(r.stderr for r in results if r.returncode == 1)
    assert pods_gpus(stack, namespace) == limit


def test_a_pod_created_and_deleted_at_once_is_no_refusal_of_the_next(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """A researcher who creates a pod, deletes it at once (kubectl waits until the API has removed
    it, before the reconciler settled it) and creates it again is not refused by the count of the
    one that is gone: ten times in a row. The quota still holds: with that pod there, another is
    refused, and the pods that exist never ask more than the quota."""
    limit = 2
    team = tenants.create(spec_extra={"gpu": {"total": limit}})
    me, namespace = team.researcher, team.namespace
    refusals = []
    for attempt in range(10):
        created = me.apply(gpu_pod("cycle", limit), namespace)
        if created.returncode != 0:
            refusals.append(f"attempt {attempt}: {created.stderr.strip()}")
            continue
        deleted = me.kubectl("delete", "pod", "cycle", "-n", namespace, "--wait=true", "--timeout=30s")
        assert deleted.returncode == 0, deleted.stderr
    assert refusals == [], refusals
    assert me.apply(gpu_pod("cycle", limit), namespace).returncode == 0
    refused = me.apply(gpu_pod("beyond", 1), namespace)
    assert refused.returncode == 1
    assert f"uses {limit} of {limit} GPUs" in refused.stderr, refused.stderr
    assert pods_gpus(stack, namespace) == limit


def test_a_refusal_by_a_pod_that_is_gone_waits_for_a_late_reconcilers_release(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """The reconciler is the witness that a pod created and deleted before it was settled is gone.
    Late (paused here for half a second), the webhook holds the next pod's refusal for its release,
    within the count's bound, rather than refuse; the quota still holds after it."""
    limit = 2
    team = tenants.create(spec_extra={"gpu": {"total": limit}})
    me, namespace = team.researcher, team.namespace
    reconciler = next(p for p in stack.processes if p.name == "reconciler-0")
    os.kill(reconciler.pid, signal.SIGSTOP)  # nothing is settled: the pod below stays a reservation
    resume = threading.Timer(0.5, os.kill, (reconciler.pid, signal.SIGCONT))
    try:
        assert me.apply(gpu_pod("cycle", limit), namespace).returncode == 0
        deleted = me.kubectl("delete", "pod", "cycle", "-n", namespace, "--wait=true", "--timeout=30s")
        assert deleted.returncode == 0, deleted.stderr
        resume.start()
        again = me.apply(gpu_pod("cycle", limit), namespace)
    finally:
        resume.cancel()
        os.kill(reconciler.pid, signal.SIGCONT)
    assert again.returncode == 0, again.stderr
    refused = me.apply(gpu_pod("beyond", 1), namespace)
    assert refused.returncode == 1
    assert f"uses {limit} of {limit} GPUs" in refused.stderr, refused.stderr
    assert pods_gpus(stack, namespace) == limit


def test_beyond_quota_pods_run_as_preemptible_when_the_tenant_allows_it(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 2, "overQuota": "preemptible"}})
    me = team.researcher
    assert me.apply(gpu_pod("in-quota", 2, model=None), team.namespace).returncode == 0
    extra = me.apply(gpu_pod("extra", 1, model=None), team.namespace)
    assert extra.returncode == 0, extra.stderr
    assert (
        "Warning: [gpu-preemptible] asks 1 GPU, uses 2 of 2 GPUs: admitted as preemptible, may be evicted"
        in extra.stderr
    )
    live = get_json(stack, "pod/extra", "-n", team.namespace)
    assert live is not None
    assert live["metadata"]["labels"]["labgate.io/preemptible"] == "true"
    assert live["spec"]["priorityClassName"] == "research-preemptible"
    assert live["spec"]["priority"] == -100
    eventually(lambda: gpu_used(stack, team.name) == 2, what="the preemptible pod holds no reservation")
    # Claiming the label by hand does not buy GPUs in a tenant that refuses beyond quota.
    strict = tenants.create(spec_extra={"gpu": {"total": 1}})
    claimed = gpu_pod("sneaky", 1, model=None, labels={"labgate.io/preemptible": "true"})
    refused = strict.researcher.apply(claimed, strict.namespace)
    assert refused.returncode == 1
    assert "[gpu-preemptible]" in refused.stderr
