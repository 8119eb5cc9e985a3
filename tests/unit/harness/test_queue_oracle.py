"""The queue oracle on hand-written API states: a clean state is clean, and each way around the queue
(a pod of an unadmitted Workload, a Job without one, GPUs outside any queue, three counts that
differ, a FailedCreate loop) is caught, with the objects named."""

from __future__ import annotations

from typing import Any

import pytest

from tests.queue_oracle import (
    GpuCounts,
    QueueState,
    collect,
    failed_create_loops,
    gpu_counts,
    refusals,
    reserved_gpus,
    selects,
    violations,
)

IMAGE = "registry.lab.example/research/trainer:v1"
NS = "vision"


def _tenant(used: int | None) -> dict[str, Any]:
    status = {} if used is None else {"status": {"gpu": {"used": used}}}
    return {"metadata": {"name": "vision"}, "spec": {"gpu": {"total": 8}}, **status}


def _queue(reserved: int, *, selector: dict[str, Any] | None = None) -> dict[str, Any]:
    resources = [{"name": "nvidia.com/gpu", "total": str(reserved)}, {"name": "cpu", "total": "3"}]
    return {
        "metadata": {"name": "vision"},
        "spec": {"namespaceSelector": selector or {"matchLabels": {"labgate.io/tenant": "vision"}}},
        "status": {"flavorsReservation": [{"name": "vision-h100", "resources": resources}]},
    }


def _owner(kind: str, name: str) -> dict[str, Any]:
    return {"kind": kind, "name": name, "uid": f"uid-{name}", "controller": True}


def _pod(name: str, *, gpus: int, owner: dict[str, Any] | None, node: str | None = "n0") -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": IMAGE}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "metadata": {"name": name, "namespace": NS, "ownerReferences": [owner] if owner else []},
        "spec": {"containers": [container], **({"nodeName": node} if node else {})},
        "status": {"phase": "Running"},
    }


def _workload(job: str, *, admitted: bool) -> dict[str, Any]:
    condition = {"type": "QuotaReserved", "status": "True" if admitted else "False"}
    return {
        "metadata": {"name": f"job-{job}", "namespace": NS, "ownerReferences": [_owner("Job", job)]},
        "status": {"conditions": [condition]},
    }


def _state(
    pods: list[dict[str, Any]],
    *,
    workloads: list[dict[str, Any]] | None = None,
    reserved: int = 0,
    used: int | None = 0,
) -> QueueState:
    return QueueState(
        tenants=[_tenant(used)],
        namespaces=[{"metadata": {"name": NS, "labels": {"labgate.io/tenant": "vision"}}}],
        nodes=[{"metadata": {"name": "n0", "labels": {"nvidia.com/gpu.product": "H100"}}}],
        pods=pods,
        workloads=workloads or [],
        cluster_queues=[_queue(reserved)],
    )


def test_an_admitted_jobs_pods_and_cpu_pods_outside_the_queue_with_one_count_are_clean() -> None:
    state = _state(
        [
            _pod("train-0", gpus=8, owner=_owner("Job", "train")),
            _pod("web-1", gpus=0, owner=_owner("ReplicaSet", "web-5d8")),
            _pod("solo", gpus=0, owner=None),
            _pod("waiting", gpus=8, owner=_owner("Job", "later"), node=None),  # not bound
        ],
        workloads=[_workload("train", admitted=True), _workload("later", admitted=False)],
        reserved=8,
        used=8,
    )
    assert violations(state) == []
    assert gpu_counts(state) == {"vision": GpuCounts(bound=8, reserved_by_kueue=8, counted_by_labgate=8)}


@pytest.mark.parametrize(
    ("pod", "workloads", "expected"),
    [
        (
            _pod("train-0", gpus=1, owner=_owner("Job", "train")),
            [_workload("train", admitted=False)],
            'pod vision/train-0 of tenant "vision" is bound to node "n0", but its Workload "job-train" '
            "holds no quota reservation (not admitted by Kueue)",
        ),
        (
            _pod("train-0", gpus=0, owner=_owner("Job", "train")),
            [],
            'pod vision/train-0 of tenant "vision" is bound to node "n0", but its owner Job "train" has '
            "no Workload: it skipped the queue",
        ),
        (
            _pod("web-0", gpus=1, owner=_owner("ReplicaSet", "web-5d8")),
            [],
            'pod vision/web-0 of tenant "vision" is bound to node "n0", but it holds 1 GPUs outside any '
            'queue (controller: ReplicaSet "web-5d8", which Kueue queues no Workload for)',
        ),
    ],
)
def test_a_bound_pod_kueue_did_not_admit_is_caught(
    pod: dict[str, Any], workloads: list[dict[str, Any]], expected: str
) -> None:
    gpus = sum(
        int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
        for c in pod["spec"]["containers"]
    )
    state = _state([pod], workloads=workloads, reserved=gpus, used=gpus)
    assert violations(state) == [expected]


def test_a_pod_being_deleted_or_finished_is_not_judged_by_the_queue() -> None:
    going = _pod("web-0", gpus=1, owner=_owner("ReplicaSet", "web-5d8"))
    going["metadata"]["deletionTimestamp"] = "2026-12-03T14:00:00Z"
    done = _pod("old-0", gpus=1, owner=_owner("Job", "old"))
    done["status"]["phase"] = "Succeeded"
    assert violations(_state([going, done], reserved=1, used=1)) == []


def test_three_counts_that_differ_are_caught_and_a_tenant_without_a_queue_is_not_judged() -> None:
    state = _state([_pod("web-0", gpus=8, owner=None)], reserved=0, used=8)
    found = violations(state)
    assert found[-1] == (
        'tenant "vision" has 8 GPUs bound on nodes, 0 reserved by Kueue (ClusterQueue vision) and 8 '
        "counted by labgate (status.gpu.used): three counts of what it holds"
    )
    unqueued = QueueState(tenants=state.tenants, namespaces=state.namespaces, pods=state.pods)
    assert violations(unqueued) == []
    assert gpu_counts(_state([], reserved=0, used=None))["vision"].agree() is False


def test_collect_reads_each_kind_once() -> None:
    asked: list[str] = []

    def items_of(kind: str) -> list[Any]:
        asked.append(kind)
        return []

    collect(items_of)
    assert sorted(asked) == sorted(["Tenant", "Namespace", "Node", "Pod", "Workload", "ClusterQueue"])


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (None, {"a": "1"}, False),
        ({}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {}, True),
    ],
)
def test_selects_as_a_label_selector(selector: Any, labels: dict[str, str], expected: bool) -> None:
    assert selects(selector, labels) is expected


def test_reserved_gpus_falls_back_to_usage_and_reads_milli_quantities() -> None:
    queue = _queue(0)
    queue["status"] = {
        "flavorsUsage": [{"name": "f", "resources": [{"name": "nvidia.com/gpu", "total": "4000m"}]}]
    }
    assert reserved_gpus(queue) == 4
    assert reserved_gpus({"metadata": {"name": "q"}}) == 0


def _event(name: str, kind: str, *, count: int, first: str, last: str) -> dict[str, Any]:
    return {
        "reason": "FailedCreate",
        "involvedObject": {"kind": kind, "name": name, "namespace": NS},
        "count": count,
        "firstTimestamp": first,
        "lastTimestamp": last,
        "message": f"Error creating: admission webhook denied the request ({name})",
    }


def test_a_controller_refused_again_and_again_over_the_bound_loops() -> None:
    events = [
        _event("train", "Job", count=3, first="2026-12-03T14:00:00Z", last="2026-12-03T14:00:09Z"),
        _event("web-5d8", "ReplicaSet", count=1, first="2026-12-03T14:00:00Z", last="2026-12-03T14:00:00Z"),
        _event("burst", "Job", count=4, first="2026-12-03T14:00:00Z", last="2026-12-03T14:00:02Z"),
        {
            **_event("other", "Job", count=9, first="2026-12-03T14:00:00Z", last="2026-12-03T14:01:00Z"),
            "reason": "Created",
        },
    ]
    refused = refusals(events, namespace=NS, is_mine=lambda o: True)
    assert sorted(refused) == ["Job/burst", "Job/train", "ReplicaSet/web-5d8"]
    assert failed_create_loops(refused, bound_seconds=6) == [
        "Job/train loops on FailedCreate: refused 3 times over 9s; last: Error creating: admission webhook "
        "denied the request (train)"
    ]
    assert refusals(events, namespace=NS, is_mine=lambda o: o["kind"] == "ReplicaSet").keys() == {
        "ReplicaSet/web-5d8"
    }
