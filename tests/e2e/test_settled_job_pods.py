"""The mutating webhook is not called for a pod the Job controller makes from a template labgate
already mutated, in a tenant that refuses GPU pods beyond quota; every such pod is still judged by
the validating webhook, and every other pod is still mutated.

What the apiserver did is read from its own metrics (apiserver_admission_*), not from labgate."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import pytest

from devcluster.stack import LabgateStack
from tests.e2e.conftest import TenantFactory, TenantUnderTest, tenant_pool
from tests.e2e.test_reconciler import eventually, get_json

pytestmark = [pytest.mark.quota, pytest.mark.tenancy]

IMAGE = "registry.lab.example/research/trainer:v1"
REFUSING = "mutate-refusing-tenants.labgate.io"
EVERY = "mutate.labgate.io"
_SAMPLE = re.compile(r"^(?P<name>[a-z_]+)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def _counter(stack: LabgateStack, metric: str, **wanted: str) -> float:
    """The sum of `metric`'s samples whose labels include `wanted`, from the apiserver's /metrics."""
    total = 0.0
    for line in stack.admin_kubectl("get", "--raw", "/metrics").splitlines():
        sample = _SAMPLE.match(line)
        if sample is None or sample["name"] != metric:
            continue
        labels = dict(_LABEL.findall(sample["labels"]))
        if all(labels.get(k) == v for k, v in wanted.items()):
            total += float(sample["value"])
    return total


def _spared(stack: LabgateStack, webhook: str) -> float:
    return _counter(
        stack, "apiserver_admission_match_condition_exclusions_total", name=webhook, operation="CREATE"
    )


def _called(stack: LabgateStack, webhook: str) -> float:
    return _counter(stack, "apiserver_admission_webhook_request_total", name=webhook, operation="CREATE")


def _team(tenants: TenantFactory, over_quota: str, total: int) -> TenantUnderTest:
    name = f"sj-{over_quota[:3]}-{uuid.uuid4().hex[:6]}"
    team = tenants.create(
        name=name,
        spec_extra={
            "gpu": {"total": total, "models": {"h100": total}, "overQuota": over_quota},
            "placement": {"nodePools": [tenant_pool(name)], "allowOnDemand": False},
        },
    )
    eventually(
        lambda: _over_quota_label(tenants.stack, team.namespace) == over_quota,
        what="the reconciler labels the namespace with the tenant's overQuota",
    )
    return team


def _over_quota_label(stack: LabgateStack, namespace: str) -> str | None:
    labels = ((get_json(stack, f"namespace/{namespace}") or {}).get("metadata") or {}).get("labels") or {}
    value = labels.get("labgate.io/gpu-over-quota")
    return None if value is None else str(value)


def _job(name: str, pods: int, gpus: int) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "train", "image": IMAGE, "imagePullPolicy": "IfNotPresent"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
        },
    }


def _pods(stack: LabgateStack, namespace: str, job: str) -> list[dict[str, Any]]:
    listed = get_json(stack, "pods", "-n", namespace, "-l", f"job-name={job}") or {}
    items: list[dict[str, Any]] = listed.get("items", [])
    return items


def _refused_creates(stack: LabgateStack, namespace: str, job: str) -> list[str]:
    events = get_json(
        stack, "events", "-n", namespace, "--field-selector", f"involvedObject.name={job},reason=FailedCreate"
    )
    return [str(e.get("message", "")) for e in (events or {}).get("items", [])]


def _hold_one_gpu(team: TenantUnderTest) -> None:
    """A researcher's one-GPU pod, so that of a quota of 2 one GPU is free."""
    blocker = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "blocker"},
        "spec": {
            "containers": [{"name": "m", "image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        },
    }
    created = team.researcher.apply(blocker, team.namespace)
    assert created.returncode == 0, created.stderr


def test_a_job_controllers_settled_pods_are_not_sent_to_the_mutating_webhook_but_are_still_judged(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """A tenant that refuses beyond quota, one GPU of 2 free: a Job of 2 one-GPU pods. Its first pod
    is born with everything the mutation gives (pool, pull policy, token, record), the apiserver
    spares the mutating call for its pods, and the validating webhook still refuses the second."""
    team = _team(tenants, "refuse", total=2)
    _hold_one_gpu(team)
    spared, called = _spared(stack, REFUSING), _called(stack, REFUSING)
    validated = _called(stack, "validate.labgate.io")
    assert team.researcher.apply(_job("sweep", 2, 1), team.namespace).returncode == 0
    eventually(lambda: len(_pods(stack, team.namespace, "sweep")) == 1, what="one of the Job's pods exists")
    eventually(
        lambda: any("[gpu-quota]" in m for m in _refused_creates(stack, team.namespace, "sweep")),
        what="the second pod refused [gpu-quota] by the validating webhook",
    )
    (pod,) = _pods(stack, team.namespace, "sweep")
    spec = pod["spec"]
    assert spec["nodeSelector"]["labgate.io/node-pool"] == f"{team.name}-spot"
    assert spec["automountServiceAccountToken"] is False
    assert [c["imagePullPolicy"] for c in spec["containers"]] == ["Always"]
    assert "labgate.io/mutations" in pod["metadata"]["annotations"]
    # The Job itself was mutated; its pod and the refused second (at least one try) were spared,
    # and each of them was sent to the validating webhook.
    assert _called(stack, REFUSING) - called == 1
    assert _spared(stack, REFUSING) - spared >= 2
    assert _called(stack, "validate.labgate.io") - validated >= 3


def test_a_pod_that_only_looks_like_a_settled_job_pod_is_still_mutated(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """The attacker's pair: a bare pod that forges the record annotation and a Job owner, created by
    the researcher and by the tenant admin, is still sent to the mutating webhook and mutated: its
    requester is not the Job controller."""
    team = _team(tenants, "refuse", total=4)
    forged: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "forged",
            "annotations": {"labgate.io/mutations": "[]"},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "ghost", "uid": "0", "controller": True}
            ],
        },
        "spec": {
            "automountServiceAccountToken": True,
            "containers": [{"name": "train", "image": IMAGE, "imagePullPolicy": "IfNotPresent"}],
        },
    }
    for who, name in ((team.researcher, "forged-r"), (team.admin, "forged-a")):
        forged["metadata"]["name"] = name
        called = _called(stack, REFUSING)
        created = who.kubectl(
            "create", "-n", team.namespace, "-o", "json", "-f", "-", stdin=json.dumps(forged)
        )
        assert created.returncode == 0, created.stderr
        stored = json.loads(created.stdout)
        assert [c["imagePullPolicy"] for c in stored["spec"]["containers"]] == ["Always"], who.name
        assert _called(stack, REFUSING) - called == 1, who.name


def test_a_job_in_a_tenant_that_admits_beyond_quota_as_preemptible_still_has_each_pod_mutated(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """In a tenant whose GPU pods beyond quota are admitted as preemptible, that decision is each pod's,
    at its creation: one GPU of 2 free, a Job of 2 one-GPU pods runs both, one of them preemptible.
    The tenant refused beyond quota first: the reconciler relabels its namespace when that changes."""
    team = _team(tenants, "refuse", total=2)
    change = {"spec": {"gpu": {"total": 2, "models": {"h100": 2}, "overQuota": "preemptible"}}}
    stack.admin_kubectl("patch", f"tenant/{team.name}", "--type=merge", "-p", json.dumps(change))
    eventually(
        lambda: _over_quota_label(stack, team.namespace) == "preemptible",
        what="the reconciler relabels the namespace preemptible",
    )
    _hold_one_gpu(team)
    called = _called(stack, EVERY)
    assert team.researcher.apply(_job("burst", 2, 1), team.namespace).returncode == 0
    eventually(lambda: len(_pods(stack, team.namespace, "burst")) == 2, what="both pods exist")
    marked = [
        p["metadata"]["name"]
        for p in _pods(stack, team.namespace, "burst")
        if p["metadata"].get("labels", {}).get("labgate.io/preemptible") == "true"
    ]
    assert len(marked) == 1, marked
    assert _called(stack, EVERY) - called >= 3
