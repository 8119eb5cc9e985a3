"""The validating webhook is not called when the Job controller takes its finalizer off a pod and
changes nothing else: every Job pod's last write, which would otherwise reach labgate at the end of
every copy of every Job. Any other UPDATE of a pod is still judged: the Job controller's that also
changes a label, adds a finalizer or touches the spec, and a member's finalizer change.

What the apiserver did is read from its own metrics (apiserver_admission_*), not from labgate."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from devcluster.stack import LabgateStack
from tests.e2e.conftest import Researcher, TenantFactory, TenantUnderTest
from tests.e2e.test_reconciler import eventually, get_json
from tests.e2e.test_settled_job_pods import IMAGE, _counter, _job, _pods, _team

pytestmark = [pytest.mark.tenancy]

VALIDATING = "validate.labgate.io"
JOB_CONTROLLER = "system:serviceaccount:kube-system:job-controller"
JOB_TRACKING = "batch.kubernetes.io/job-tracking"


def _excluded(stack: LabgateStack) -> float:
    return _counter(
        stack, "apiserver_admission_match_condition_exclusions_total", name=VALIDATING, operation="UPDATE"
    )


def _called(stack: LabgateStack) -> float:
    return _counter(stack, "apiserver_admission_webhook_request_total", name=VALIDATING, operation="UPDATE")


def _unschedulable_job(name: str) -> dict[str, Any]:
    """Two pods no node can hold: they stay unbound, so only the Job controller ever takes their
    finalizer off (KWOK, which plays the kubelet, takes the finalizers off pods it runs)."""
    job = _job(name, 2, 0)
    (container,) = job["spec"]["template"]["spec"]["containers"]
    container["resources"] = {"requests": {"cpu": "100000"}}
    return job


def test_the_job_controller_takes_its_finalizers_off_without_calling_the_validating_webhook(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """A Job of two pods, suspended: the Job controller deletes both and takes its tracking finalizer
    off each, the apiserver excludes those UPDATEs from the validating webhook, and the pods go."""
    team = _team(tenants, "refuse", total=2)
    assert team.researcher.apply(_unschedulable_job("idle"), team.namespace).returncode == 0
    eventually(
        lambda: (
            [
                JOB_TRACKING in p["metadata"].get("finalizers", [])
                for p in _pods(stack, team.namespace, "idle")
            ]
            == [True, True]
        ),
        what="the Job's two pods exist, each with the Job controller's finalizer",
    )
    excluded = _excluded(stack)
    suspend = json.dumps({"spec": {"suspend": True}})
    suspended = team.researcher.kubectl(
        "patch", "job", "idle", "-n", team.namespace, "--type=merge", "-p", suspend
    )
    assert suspended.returncode == 0, suspended.stderr
    eventually(lambda: not _pods(stack, team.namespace, "idle"), what="the suspended Job's pods are gone")
    assert _excluded(stack) - excluded >= 2


def _let_the_job_controller_read_pods(stack: LabgateStack, namespace: str) -> None:
    """kubectl reads a pod before it patches it; the Job controller's own role patches pods without
    reading them one by one (it lists and watches), so it is granted `get` here."""
    for manifest in (
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "job-controller-get-pods", "namespace": namespace},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "job-controller-get-pods", "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "job-controller-get-pods",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "job-controller", "namespace": "kube-system"}],
        },
    ):
        stack.admin_kubectl("apply", "-f", "-", stdin=json.dumps(manifest))


def _as_job_controller(stack: LabgateStack, namespace: str, pod: str, patch: dict[str, Any]) -> Any:
    return stack.cluster_kubectl(
        f"--as={JOB_CONTROLLER}",
        "--as-group=system:serviceaccounts",
        "--as-group=system:serviceaccounts:kube-system",
        "--as-group=system:authenticated",
        "patch",
        "pod",
        pod,
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps(patch),
    )


def _as_member(who: Researcher, namespace: str, pod: str, patch: dict[str, Any]) -> Any:
    return who.kubectl("patch", "pod", pod, "-n", namespace, "--type=merge", "-p", json.dumps(patch))


def _held_pod(team: TenantUnderTest, name: str, finalizers: list[str]) -> dict[str, Any]:
    held = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {"containers": [{"name": "m", "image": IMAGE, "resources": {"requests": {"cpu": "100000"}}}]},
    }
    created = team.researcher.kubectl(
        "create", "-n", team.namespace, "-o", "json", "-f", "-", stdin=json.dumps(held)
    )
    assert created.returncode == 0, created.stderr
    stored: dict[str, Any] = json.loads(created.stdout)
    return stored


def _finalizers(stack: LabgateStack, namespace: str, pod: str) -> list[str]:
    live = get_json(stack, "pod", pod, "-n", namespace) or {}
    return list((live.get("metadata") or {}).get("finalizers") or [])


def test_only_a_finalizer_removal_by_the_job_controller_skips_the_validating_webhook(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """The attacker's pairs, on one pod with five finalizers: the Job controller taking one off is
    excluded; the Job controller also labelling the pod, adding a finalizer or changing its spec is
    judged; the researcher and the tenant admin taking one off are judged and admitted, and taking
    one off while tolerating another tenant's pool refused [placement-pool]."""
    team, other = _team(tenants, "refuse", total=2), _team(tenants, "refuse", total=2)
    ns, name = team.namespace, f"held-{uuid.uuid4().hex[:6]}"
    marks = [f"example.com/hold-{i}" for i in range(5)]
    stored = _held_pod(team, name, marks)
    _let_the_job_controller_read_pods(stack, ns)

    def step(patch: dict[str, Any], *, by: Researcher | None = None) -> tuple[Any, float, float]:
        excluded, called = _excluded(stack), _called(stack)
        done = _as_job_controller(stack, ns, name, patch) if by is None else _as_member(by, ns, name, patch)
        return done, _excluded(stack) - excluded, _called(stack) - called

    # The Job controller takes one finalizer off, nothing else: not sent to labgate.
    done, excluded, called = step({"metadata": {"finalizers": marks[1:]}})
    assert done.returncode == 0, done.stderr
    assert (excluded, called) == (1, 0)
    assert _finalizers(stack, ns, name) == marks[1:]

    # The same identity also labelling the pod, or adding a finalizer: judged, and admitted.
    done, excluded, called = step({"metadata": {"finalizers": marks[2:], "labels": {"stage": "done"}}})
    assert done.returncode == 0, done.stderr
    assert excluded == 0
    assert called >= 1
    done, excluded, called = step({"metadata": {"finalizers": [*marks[2:], "example.com/extra"]}})
    assert done.returncode == 0, done.stderr
    assert excluded == 0
    assert called >= 1

    # A member taking a finalizer off: judged (a member's every write is), and admitted; taking one
    # off while the pod starts tolerating another tenant's pool: judged, and refused.
    foreign = {
        "key": "labgate.io/pool",
        "operator": "Equal",
        "value": f"{other.name}-spot",
        "effect": "NoSchedule",
    }
    tolerations = {"tolerations": [*stored["spec"].get("tolerations", []), foreign]}
    for who, kept in ((team.researcher, marks[3:]), (team.admin, marks[4:])):
        finalizers = {"finalizers": [*kept, "example.com/extra"]}
        done, excluded, called = step({"metadata": finalizers, "spec": tolerations}, by=who)
        assert done.returncode == 1, (who.name, done.stdout)
        assert "[placement-pool]" in done.stderr, done.stderr
        assert excluded == 0, who.name
        assert called >= 1, who.name
        done, excluded, called = step({"metadata": finalizers}, by=who)
        assert done.returncode == 0, (who.name, done.stderr)
        assert excluded == 0, who.name
        assert called >= 1, who.name
    assert _finalizers(stack, ns, name) == [marks[4], "example.com/extra"]

    # The Job controller's identity taking a finalizer off while it changes the spec: judged (the
    # policies let the platform change a running pod's tolerations, so it is admitted).
    done, excluded, called = step({"metadata": {"finalizers": ["example.com/extra"]}, "spec": tolerations})
    assert done.returncode == 0, done.stderr
    assert excluded == 0
    assert called >= 1

    stack.admin_kubectl(
        "patch", "pod", name, "-n", ns, "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
    )
    stack.admin_kubectl("delete", "pod", name, "-n", ns, "--wait=false")
