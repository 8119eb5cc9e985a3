"""The audit judges an existing object as it was admitted (issue 22 item 2): the scheduler's binding
(spec.nodeName written through pods/binding, owned by no manager) is not held against a Pod; a
nodeName the requester sent (owned by their manager) still is."""

from __future__ import annotations

from typing import Any

import pytest

from cli.admitted_state import as_admitted, is_bound_by_scheduler
from cli.policy_impact import export_snapshot
from labgate.core.api_resources import Kind
from webhook.pod_templates import BUILTIN_WORKLOAD_KINDS

CREATED = {"manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1"}
KUBELET = {"manager": "kubelet", "operation": "Update", "subresource": "status", "fieldsType": "FieldsV1"}


def _pod(
    name: str, *, requested: dict[str, Any], status_fields: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "managedFields": [
                {**CREATED, "fieldsV1": {"f:spec": requested}},
                {**KUBELET, "fieldsV1": status_fields or {"f:status": {"f:phase": {}}}},
            ],
        },
        "spec": {"nodeName": "gpu-node-3", "containers": [{"name": "main", "image": "x"}]},
        "status": {"phase": "Running"},
    }


BOUND = _pod("scheduled", requested={"f:containers": {}})
PINNED = _pod("pinned", requested={"f:containers": {}, "f:nodeName": {}})
# A subresource's manager owning spec.nodeName does not make it the requester's.
STATUS_ONLY = _pod("scheduled-2", requested={}, status_fields={"f:spec": {"f:nodeName": {}}})


@pytest.mark.parametrize(
    ("pod", "is_bound"),
    [
        (BOUND, True),
        (PINNED, False),
        (STATUS_ONLY, True),
        # No managedFields (kubectl get -o yaml): who set it cannot be told, it is kept.
        ({**BOUND, "metadata": {"name": "x"}}, False),
        ({**BOUND, "spec": {"containers": []}}, False),  # not scheduled yet
        ({**BOUND, "kind": "Job", "apiVersion": "batch/v1"}, False),
    ],
)
def test_a_pod_is_bound_by_the_scheduler_when_no_manager_sent_its_node_name(
    pod: dict[str, Any], *, is_bound: bool
) -> None:
    assert is_bound_by_scheduler(pod) is is_bound
    assert ("nodeName" not in as_admitted(pod)["spec"]) is (is_bound or "nodeName" not in pod["spec"])


def test_as_admitted_leaves_the_live_object_alone() -> None:
    admitted = as_admitted(BOUND)
    assert "nodeName" not in admitted["spec"]
    assert BOUND["spec"]["nodeName"] == "gpu-node-3"
    assert as_admitted(PINNED) is PINNED


class _Cluster:
    """The list calls export_snapshot makes, answered from memory."""

    def __init__(self, pods: list[dict[str, Any]]):
        self.pods = pods

    def list(self, kind: Kind, *, namespace: str | None = None) -> dict[str, Any]:
        if kind.kind == "Tenant":
            tenant = {"metadata": {"name": "team-a"}, "spec": {"namespaces": {"names": ["team-a"]}}}
            return {"items": [tenant]}
        if kind.kind == "Namespace":
            return {"items": [{"metadata": {"name": "team-a", "labels": {"labgate.io/tenant": "team-a"}}}]}
        if kind.kind == "Pod":
            return {"items": self.pods}
        return {"items": []}

    def lister(self, kind: Kind, **_: Any) -> Any:
        return lambda **__: {"items": []}


def test_the_exported_snapshot_holds_pods_as_admitted() -> None:
    snapshot = export_snapshot(_Cluster([BOUND, PINNED]), BUILTIN_WORKLOAD_KINDS)
    specs = {w["metadata"]["name"]: w["spec"] for w in snapshot.workloads}
    assert "nodeName" not in specs["scheduled"]  # the scheduler's binding
    assert specs["pinned"]["nodeName"] == "gpu-node-3"  # the requester's: placement-node-name judges it
    assert all("managedFields" not in w["metadata"] for w in snapshot.workloads)
    # Every object listed, by kind: what the labgate-admission report may still speak of (item 8).
    assert snapshot.present["team-a"][("", "Pod")] == {"scheduled", "pinned"}
    assert snapshot.present["team-a"][("batch", "Job")] == set()


@pytest.mark.tools  # the policies, through the pinned opa
def test_the_audit_refuses_a_pinned_pod_and_not_a_scheduled_one() -> None:
    from cli.offline_admission import OfflineOpa, facts_from_manifests
    from cli.policy_impact import audit_rows, cluster_items, evaluate
    from devcluster.stack import POLICY_DIR
    from devcluster.tools import binary, ensure_tools

    ensure_tools("opa")
    cluster = _Cluster([BOUND, PINNED])
    snapshot = export_snapshot(cluster, BUILTIN_WORKLOAD_KINDS)
    snapshot.definitions[0]["spec"]["members"] = {"researchers": [{"kind": "User", "name": "alice"}]}
    facts = facts_from_manifests(snapshot.definitions, platform_namespace="labgate-system")
    with OfflineOpa(binary("opa"), POLICY_DIR, facts) as opa:
        rows = audit_rows(evaluate(opa, cluster_items(snapshot), BUILTIN_WORKLOAD_KINDS))
    node_name = [(r["object"], r["mode"]) for r in rows if r["rule"] == "placement-node-name"]
    assert node_name == [("Pod team-a/pinned", "enforce")]
