"""The tenant reconciler against the real control plane: provisioning, researchers' rights through
real kubectl, drift repair for every managed kind, member removal, deletion, leader failover."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from devcluster.processes import ManagedProcess
from devcluster.stack import LABGATE_NAMESPACE, LabgateStack
from tests.e2e.conftest import Researcher, TenantFactory, TenantUnderTest, pod_manifest

pytestmark = pytest.mark.tenancy


def eventually(check: Callable[[], bool], *, what: str, timeout: float = 30.0) -> None:
    """Poll an observable condition, at most `timeout` seconds (repairs are watch-driven, not timed)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not true after {timeout:.0f}s")
        time.sleep(0.2)


def get_json(stack: LabgateStack, *args: str) -> dict[str, Any] | None:
    result = stack.cluster_kubectl("get", *args, "-o", "json")
    return json.loads(result.stdout) if result.returncode == 0 else None


def can_i(who: Researcher, verb: str, resource: str, namespace: str) -> bool:
    result = who.kubectl("auth", "can-i", verb, resource, "-n", namespace)
    return result.stdout.strip() == "yes"


def test_new_tenant_is_fully_provisioned(stack: LabgateStack, tenants: TenantFactory) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 12}, "network": {"allowEgress": False}})
    tenant = get_json(stack, f"tenant/{team.name}")
    assert tenant is not None
    assert tenant["status"]["namespaceList"] == team.namespace
    assert tenant["status"]["observedGeneration"] == tenant["metadata"]["generation"]
    assert "labgate.io/cleanup" in tenant["metadata"]["finalizers"]
    namespace = get_json(stack, f"namespace/{team.namespace}")
    assert namespace is not None
    assert namespace["metadata"]["labels"]["labgate.io/tenant"] == team.name
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    bindings = get_json(stack, "rolebindings", "-n", team.namespace)
    assert bindings is not None
    by_name = {b["metadata"]["name"]: b for b in bindings["items"]}
    assert by_name["labgate-researchers"]["roleRef"]["name"] == "labgate:researcher"
    assert by_name["labgate-researchers"]["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": team.researcher.groups[0]}
    ]
    assert by_name["labgate-admins"]["subjects"][0]["name"] == team.admin.name
    quota = get_json(stack, "resourcequota/labgate-gpu", "-n", team.namespace)
    assert quota is not None
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "12"}
    egress = get_json(stack, "networkpolicy/labgate-baseline-egress", "-n", team.namespace)
    assert egress is not None
    # Egress off: only the tenant's own namespaces and DNS, no ipBlock to the internet.
    assert all("ipBlock" not in peer for rule in egress["spec"]["egress"] for peer in rule["to"])
    account = get_json(stack, "serviceaccount/experiment", "-n", team.namespace)
    assert account is not None
    assert account["automountServiceAccountToken"] is False
    assert get_json(stack, "limitrange/labgate-defaults", "-n", team.namespace) is not None


def test_researchers_act_within_their_rights(tenants: TenantFactory) -> None:
    team, other = tenants.create(), tenants.create()
    me = team.researcher
    assert me.apply(pod_manifest("train"), team.namespace).returncode == 0
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "hp"}, "data": {"lr": "3e-4"}}
    assert me.apply(configmap, team.namespace).returncode == 0
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "wandb"}, "stringData": {"key": "k"}}
    # Researchers write Secrets without reading them back (restricted Secrets are for their pods),
    # so they apply server-side: a client-side apply reads the live object first.
    written = me.kubectl("apply", "--server-side", "-n", team.namespace, "-f", "-", stdin=json.dumps(secret))
    assert written.returncode == 0, written.stderr
    for verb, resource in [
        ("create", "jobs.batch"),
        ("get", "pods/log"),
        ("create", "pods/exec"),
        ("create", "pods/portforward"),
        ("delete", "pods"),
    ]:
        assert can_i(me, verb, resource, team.namespace), f"{verb} {resource}"
    # ... and no further: no RBAC, quotas, network policies, namespace labels, other tenants.
    for verb, resource in [
        ("create", "rolebindings"),
        ("patch", "resourcequotas"),
        ("delete", "networkpolicies"),
        ("create", "networkpolicies"),
        ("get", "secrets"),
        ("list", "secrets"),
    ]:
        assert not can_i(me, verb, resource, team.namespace), f"{verb} {resource}"
    refused = me.kubectl("label", "namespace", team.namespace, "labgate.io/tenant=stolen", "--overwrite")
    assert refused.returncode == 1
    assert f'User "{me.name}" cannot patch resource "namespaces"' in refused.stderr
    elsewhere = me.apply(pod_manifest("train"), other.namespace)
    assert elsewhere.returncode == 1
    assert (
        f'User "{me.name}" cannot get resource "pods" in API group "" in the namespace "{other.namespace}"'
        in (elsewhere.stderr)
    )
    # Every member may read their own Tenant (usage and limits), not another's.
    assert me.kubectl("get", "tenant", team.name).returncode == 0
    assert me.kubectl("get", "tenant", other.name).returncode == 1
    # Admins manage members' work and may author network policies; viewers only read.
    assert can_i(team.admin, "create", "networkpolicies", team.namespace)
    assert not can_i(team.admin, "create", "rolebindings", team.namespace)


def test_viewers_read_but_do_not_run(stack: LabgateStack, tenants: TenantFactory) -> None:
    team = tenants.create(spec_extra={})
    viewer = Researcher("vera", (), stack.kubeconfig_for("vera"))
    tenant = get_json(stack, f"tenant/{team.name}")
    assert tenant is not None
    members = tenant["spec"]["members"]
    members["viewers"] = [{"kind": "User", "name": "vera"}]
    stack.admin_kubectl(
        "patch", "tenant", team.name, "--type=merge", "-p", json.dumps({"spec": {"members": members}})
    )
    eventually(lambda: can_i(viewer, "list", "pods", team.namespace), what="viewer can list pods")
    assert not can_i(viewer, "create", "pods", team.namespace)
    assert viewer.kubectl("get", "tenant", team.name).returncode == 0


def _drift_cases(
    team: TenantUnderTest,
) -> list[tuple[str, list[str], Callable[[dict[str, Any] | None], bool]]]:
    ns = team.namespace
    return [
        (
            "RoleBinding deleted",
            ["delete", "rolebinding", "labgate-researchers", "-n", ns],
            lambda o: o is not None,
        ),
        (
            "NetworkPolicy edited",
            [
                "patch",
                "networkpolicy",
                "labgate-baseline-ingress",
                "-n",
                ns,
                "--type=merge",
                "-p",
                '{"spec":{"ingress":[{}]}}',
            ],
            lambda o: o is not None and o["spec"]["ingress"] != [{}],
        ),
        (
            # Narrowed to some pods: every other pod of the namespace would be open to anyone.
            "NetworkPolicy narrowed",
            [
                "patch",
                "networkpolicy",
                "labgate-baseline-egress",
                "-n",
                ns,
                "--type=merge",
                "-p",
                '{"spec":{"podSelector":{"matchLabels":{"app":"only-this"}}}}',
            ],
            lambda o: o is not None and o["spec"]["podSelector"] in ({}, {"matchLabels": {}}),
        ),
        (
            "ResourceQuota raised",
            [
                "patch",
                "resourcequota",
                "labgate-gpu",
                "-n",
                ns,
                "--type=merge",
                "-p",
                '{"spec":{"hard":{"requests.nvidia.com/gpu":"999"}}}',
            ],
            lambda o: o is not None and o["spec"]["hard"]["requests.nvidia.com/gpu"] == "4",
        ),
        (
            "LimitRange deleted",
            ["delete", "limitrange", "labgate-defaults", "-n", ns],
            lambda o: o is not None,
        ),
        (
            "ServiceAccount deleted",
            ["delete", "serviceaccount", "experiment", "-n", ns],
            lambda o: o is not None,
        ),
        (
            "ClusterRoleBinding deleted",
            ["delete", "clusterrolebinding", f"labgate:tenant:{team.name}:member"],
            lambda o: o is not None,
        ),
        (
            "Pod Security label removed",
            ["label", "namespace", ns, "pod-security.kubernetes.io/enforce-"],
            lambda o: (
                o is not None
                and o["metadata"]["labels"].get("pod-security.kubernetes.io/enforce") == "baseline"
            ),
        ),
    ]


_DRIFT_TARGETS = {
    "RoleBinding deleted": ("rolebinding/labgate-researchers", True),
    "NetworkPolicy edited": ("networkpolicy/labgate-baseline-ingress", True),
    "NetworkPolicy narrowed": ("networkpolicy/labgate-baseline-egress", True),
    "ResourceQuota raised": ("resourcequota/labgate-gpu", True),
    "LimitRange deleted": ("limitrange/labgate-defaults", True),
    "ServiceAccount deleted": ("serviceaccount/experiment", True),
    "ClusterRoleBinding deleted": ("clusterrolebinding/labgate:tenant:{tenant}:member", False),
    "Pod Security label removed": ("namespace/{tenant}", False),
}


def _checker(
    stack: LabgateStack, args: list[str], is_repaired: Callable[[dict[str, Any] | None], bool]
) -> Callable[[], bool]:
    return lambda: is_repaired(get_json(stack, *args))


def test_drift_is_repaired_for_every_managed_kind(stack: LabgateStack, tenants: TenantFactory) -> None:
    team = tenants.create(spec_extra={"gpu": {"total": 4}})
    for case, command, is_repaired in _drift_cases(team):
        target, namespaced = _DRIFT_TARGETS[case]
        args = [target.format(tenant=team.name)] + (["-n", team.namespace] if namespaced else [])
        stack.admin_kubectl(*command)
        eventually(_checker(stack, args, is_repaired), what=case)
    events = get_json(
        stack, "events", "-n", "default", "--field-selector", f"involvedObject.name={team.name}"
    )
    assert events is not None
    messages = {e["message"] for e in events["items"] if e["reason"] == "DriftRepaired"}
    assert f"restored RoleBinding {team.namespace}/labgate-researchers" in messages
    assert f"restored ClusterRoleBinding labgate:tenant:{team.name}:member" in messages


def _drift_repaired(stack: LabgateStack, tenant: str) -> list[str]:
    events = get_json(stack, "events", "-n", "default", "--field-selector", f"involvedObject.name={tenant}")
    assert events is not None
    return [e["message"] for e in events["items"] if e["reason"] == "DriftRepaired"]


def test_a_quota_the_api_reads_back_in_canonical_form_is_no_drift(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """1,000 GPUs, 1,000 CPUs and 2,000 pods read back from the API as "1k" and "2k": the same values,
    so the quota controller's status writes, as pods come and go, make the reconciler rewrite
    nothing. Its one repair is the drift made on purpose after them."""
    team = tenants.create(spec_extra={"gpu": {"total": 1000}, "limits": {"cpu": "1000", "pods": 2000}})

    def hard(quota: str) -> dict[str, str]:
        live = get_json(stack, "resourcequota", quota, "-n", team.namespace)
        return dict((live or {}).get("spec", {}).get("hard") or {})

    assert hard("labgate-gpu") == {"requests.nvidia.com/gpu": "1k"}
    assert hard("labgate-limits") == {"requests.cpu": "1k", "pods": "2k"}
    for i in range(3):
        created = team.researcher.apply(pod_manifest(f"counted-{i}"), team.namespace)
        assert created.returncode == 0, created.stderr

    def used_pods() -> str:
        live = get_json(stack, "resourcequota", "labgate-limits", "-n", team.namespace) or {}
        return str(live.get("status", {}).get("used", {}).get("pods", ""))

    eventually(lambda: used_pods() == "3", what="the quota controller counted the 3 pods")
    # A drift made on purpose, after the status writes: once it is repaired, the reconciler has
    # seen every change before it.
    stack.admin_kubectl("delete", "serviceaccount", "experiment", "-n", team.namespace)
    repaired = f"restored ServiceAccount {team.namespace}/experiment"
    eventually(
        lambda: repaired in _drift_repaired(stack, team.name), what="the deleted ServiceAccount restored"
    )
    assert _drift_repaired(stack, team.name) == [repaired]


def test_removed_member_loses_access(stack: LabgateStack, tenants: TenantFactory) -> None:
    team = tenants.create()
    assert can_i(team.researcher, "create", "pods", team.namespace)
    stack.admin_kubectl(
        "patch",
        "tenant",
        team.name,
        "--type=json",
        "-p",
        json.dumps([{"op": "replace", "path": "/spec/members/researchers", "value": []}]),
    )
    eventually(lambda: not can_i(team.researcher, "create", "pods", team.namespace), what="access removed")
    assert team.researcher.kubectl("get", "tenant", team.name).returncode == 1


def test_deleting_a_tenant_cleans_up_but_keeps_data_namespaces(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    kept = tenants.create()
    dropped = tenants.create(spec_extra={"namespaces": {"names": [], "keepOnDelete": False}})
    stack.admin_kubectl(
        "patch",
        "tenant",
        dropped.name,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"namespaces": {"names": [dropped.namespace]}}}),
    )
    for team in (kept, dropped):
        stack.admin_kubectl("delete", "tenant", team.name, "--timeout=30s")
        assert get_json(stack, f"tenant/{team.name}") is None
        assert get_json(stack, f"clusterrolebinding/labgate:tenant:{team.name}:member") is None
    kept_namespace = get_json(stack, f"namespace/{kept.namespace}")
    assert kept_namespace is not None, "keepOnDelete (the default) keeps the namespace and its data"
    managed = "app.kubernetes.io/managed-by=labgate"
    bindings = get_json(stack, "rolebindings", "-n", kept.namespace, "-l", managed)
    assert bindings is not None
    assert bindings["items"] == []
    # Its pods may run on: the restrictions stay (the packets they stop: tests/e2e/test_node_network_policy.py).
    policies = get_json(stack, "networkpolicies", "-n", kept.namespace, "-l", managed)
    assert policies is not None
    assert sorted(p["metadata"]["name"] for p in policies["items"]) == [
        "labgate-baseline-egress",
        "labgate-baseline-ingress",
    ]
    limits = get_json(stack, "limitranges", "-n", kept.namespace, "-l", managed)
    assert limits is not None
    assert [r["metadata"]["name"] for r in limits["items"]] == ["labgate-defaults"]
    eventually(
        lambda: get_json(stack, f"namespace/{dropped.namespace}") is None,
        what="namespace deleted",
        timeout=60,
    )


def _ready_reason(stack: LabgateStack, tenant: str) -> tuple[str, str] | None:
    live = get_json(stack, f"tenant/{tenant}") or {}
    ready = [c for c in live.get("status", {}).get("conditions", []) if c.get("type") == "Ready"]
    return (ready[0]["status"], ready[0]["reason"]) if ready else None


def _events_of(stack: LabgateStack, tenant: str, reason: str) -> list[str]:
    events = get_json(stack, "events", "-n", "default", "--field-selector", f"involvedObject.name={tenant}")
    assert events is not None
    return [e["message"] for e in events["items"] if e["reason"] == reason]


def test_a_namespace_the_platform_moves_stays_moved_while_its_old_tenant_still_lists_it(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """A cluster admin relabels a namespace tenant `a` still lists to tenant `b`. From that moment
    the webhook judges it as b's and counts its pods in b's quota, so it stays b's: a's passes do
    not take it back (a second move of its running pods, unchecked), a's members lose their rights
    there, b's gain theirs, and a's Tenant says why."""
    a, b = tenants.create(), tenants.create()
    assert can_i(a.researcher, "create", "pods", a.namespace)
    stack.admin_kubectl("label", "--overwrite", "namespace", a.namespace, f"labgate.io/tenant={b.name}")
    eventually(lambda: can_i(b.researcher, "create", "pods", a.namespace), what="b's members granted there")
    held = f"{a.namespace} (labelled for tenant {b.name})"
    eventually(
        lambda: any(held in m for m in _events_of(stack, a.name, "NamespaceHeldByAnotherTenant")),
        what="a's pass over the move, which says why it does not take the namespace back",
    )
    # The Warning ends a's pass over the move: that pass is done, and left the namespace as it is.
    # a's Ready condition says so for as long as it lasts (`kubectl get tenant` shows it).
    eventually(
        lambda: _ready_reason(stack, a.name) == ("False", "NamespaceHeldByAnotherTenant"),
        what="a's Ready condition",
    )
    namespace = get_json(stack, f"namespace/{a.namespace}")
    assert namespace is not None
    assert namespace["metadata"]["labels"]["labgate.io/tenant"] == b.name
    assert not can_i(a.researcher, "create", "pods", a.namespace)
    assert can_i(b.researcher, "create", "pods", a.namespace)
    refused = a.researcher.apply(pod_manifest("after-move"), a.namespace)
    assert refused.returncode != 0
    # The infra team's next edit of Tenant a is told what to do with the name it still lists.
    viewers = {"spec": {"members": {"viewers": [{"kind": "User", "name": f"viewer-{a.name}"}]}}}
    kept = stack.cluster_kubectl("patch", "tenant", a.name, "--type=merge", "-p", json.dumps(viewers))
    assert kept.returncode != 0
    assert f"it carries the label labgate.io/tenant={b.name}: remove it from this Tenant's" in kept.stderr
    dropped = {**viewers["spec"], "namespaces": {"names": []}}
    stack.admin_kubectl("patch", "tenant", a.name, "--type=merge", "-p", json.dumps({"spec": dropped}))
    stack.admin_kubectl("wait", "--for=condition=Ready", "--timeout=30s", f"tenant/{a.name}")


def test_a_tenant_listing_a_namespace_another_tenant_holds_is_still_deleted(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """Deleted while it still lists a namespace moved to tenant `b`, Tenant `a` goes: the
    reconciler's removal of its finalizer changes no spec, so the rule on colliding namespaces
    does not judge it (refused, the Tenant would stay Terminating for ever). What the namespace
    holds stays b's."""
    a, b = tenants.create(), tenants.create()
    stack.admin_kubectl("label", "--overwrite", "namespace", a.namespace, f"labgate.io/tenant={b.name}")
    held = f"{a.namespace} (labelled for tenant {b.name})"
    eventually(
        lambda: any(held in m for m in _events_of(stack, a.name, "NamespaceHeldByAnotherTenant")),
        what="a's pass over the move",
    )
    stack.admin_kubectl("delete", "tenant", a.name, "--timeout=30s")
    assert get_json(stack, f"tenant/{a.name}") is None
    namespace = get_json(stack, f"namespace/{a.namespace}")
    assert namespace is not None
    assert namespace["metadata"]["labels"]["labgate.io/tenant"] == b.name
    assert can_i(b.researcher, "create", "pods", a.namespace)


def _lease_holder(stack: LabgateStack) -> str | None:
    lease = get_json(stack, "lease/labgate-reconciler", "-n", LABGATE_NAMESPACE)
    return None if lease is None else lease["spec"].get("holderIdentity")


@pytest.fixture
def standby(stack: LabgateStack) -> Iterator[ManagedProcess]:
    """A second reconciler replica, started once the first leads, stopped after the test, which
    waits until the first leads again: later tests on the shared stack find reconciler-0 leading."""
    # A stack just started may not have elected its first replica yet: the standby comes second.
    eventually(lambda: _lease_holder(stack) == "reconciler-0", what="the first reconciler leads")
    process = stack.start_reconciler(identity="standby")
    try:
        yield process
    finally:
        process.stop()
        eventually(lambda: _lease_holder(stack) == "reconciler-0", what="the first reconciler leads again")


def test_leader_failover_and_a_paused_leader_stops_writing(
    stack: LabgateStack, tenants: TenantFactory, standby: ManagedProcess
) -> None:
    team = tenants.create()
    leader = next(p for p in stack.processes if p.name.startswith("reconciler-") and p is not standby)
    assert _lease_holder(stack) != "standby"
    # Freeze the leader (a long GC pause or a partition): it cannot renew, the standby takes over.
    os.kill(leader.pid, signal.SIGSTOP)
    try:
        eventually(lambda: _lease_holder(stack) == "standby", what="standby holds the lease", timeout=30)
        stack.admin_kubectl("delete", "rolebinding", "labgate-researchers", "-n", team.namespace)
        eventually(
            lambda: get_json(stack, "rolebinding/labgate-researchers", "-n", team.namespace) is not None,
            what="the new leader repairs drift",
        )
    finally:
        os.kill(leader.pid, signal.SIGCONT)
    # The old leader wakes up, finds the lease held by the standby and stays a follower.
    stack.admin_kubectl(
        "wait",
        "--for=jsonpath={.spec.holderIdentity}=standby",
        "--timeout=10s",
        "-n",
        LABGATE_NAMESPACE,
        "lease/labgate-reconciler",
    )
    renewals = yaml.safe_load(
        stack.admin_kubectl("get", "lease/labgate-reconciler", "-n", LABGATE_NAMESPACE, "-o", "yaml")
    )["spec"]
    assert renewals["holderIdentity"] == "standby"
    assert renewals["leaseTransitions"] >= 1


def test_invalid_tenant_specs_are_refused_at_apply_time_with_a_clear_message(stack: LabgateStack) -> None:
    name = f"bad-{os.getpid()}"
    cases = [
        (
            {"members": {"researchers": [{"kind": "ServiceAccount", "name": "ci"}]}},
            "a ServiceAccount member needs its namespace",
        ),
        ({"members": {}, "enforcement": {"gpu-quota": "off"}}, 'Unsupported value: "off"'),
        ({"members": {}, "gpu": {"total": -1}}, "spec.gpu.total"),
        ({"members": {}, "namespaces": {"prefix": "No_Caps"}}, "spec.namespaces.prefix"),
    ]
    for spec, message in cases:
        tenant = {
            "apiVersion": "labgate.io/v1alpha1",
            "kind": "Tenant",
            "metadata": {"name": name},
            "spec": spec,
        }
        result = stack.cluster_kubectl("apply", "-f", "-", manifest=tenant)
        assert result.returncode == 1, f"admitted: {spec}"
        assert message in result.stderr, result.stderr
        assert get_json(stack, f"tenant/{name}") is None, "never half-applied"
