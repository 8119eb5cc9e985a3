"""gpu-quota-scale's input: a scale up gets the workload it resizes, read live (the Scale carries only
spec.replicas), and the tenant's GPU usage; an UPDATE of a workload gets its old replica counts.
Each beside what must not be read or changed: a scale down, a scale outside a tenant."""

from __future__ import annotations

import asyncio
import time
from typing import Any, cast

import pytest

from labgate.core.api_resources import Kind
from labgate.core.gpu_amount import GpuAmount
from labgate.core.kube import ApiException, KubeApi
from labgate.core.workload_catalog import BUILTIN_WORKLOAD_KINDS, WorkloadKind
from tests.unit.admission.test_serving_volumes import _Inventory
from webhook import facts
from webhook.admission import build_policy_input, scaled_kind
from webhook.facts import FactGatherer
from webhook.policy_input import PolicyInput, ScaledWorkloadDocument
from webhook.request_class import is_scale_up, needs_gpu_usage
from webhook.review import AdmissionRequest, parse_request
from webhook.scaled_workloads import ScaledWorkloads
from webhook.tenant_facts import TenantFacts

_SPEC = {
    "nodeSelector": {"nvidia.com/gpu.product": "h100"},
    "containers": [{"name": "main", "image": "trainer:v1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
}


def _deployment(replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serve", "namespace": "vision"},
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": {"app": "serve"}}, "spec": _SPEC}},
    }


def _scale(old: int, new: int, resource: str = "deployments") -> AdmissionRequest:
    def scale(replicas: int) -> dict[str, Any]:
        return {"apiVersion": "autoscaling/v1", "kind": "Scale", "spec": {"replicas": replicas}}

    return parse_request(
        {
            "uid": "u",
            "kind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "resource": {"group": "apps", "version": "v1", "resource": resource},
            "subResource": "scale",
            "namespace": "vision",
            "name": "serve",
            "operation": "UPDATE",
            "userInfo": {"username": "vera", "groups": ["vision"]},
            "object": scale(new),
            "oldObject": scale(old),
        }
    )


def _update(old: int, new: int) -> AdmissionRequest:
    return parse_request(
        {
            "uid": "u",
            "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "namespace": "vision",
            "name": "serve",
            "operation": "UPDATE",
            "userInfo": {"username": "vera", "groups": ["vision"]},
            "object": _deployment(new),
            "oldObject": _deployment(old),
        }
    )


class _Door:
    """The Kubernetes door's get, as the API answers it (None: 404)."""

    def __init__(self, found: dict[str, Any] | None = None, error: Exception | None = None):
        self.found, self.error = found, error
        self.asked: list[tuple[str, str, str | None, float]] = []

    def get(self, kind: Kind, name: str, *, namespace: str | None = None, timeout: float = 10) -> Any:
        self.asked.append((kind.path(namespace=namespace, name=name), name, namespace, timeout))
        if self.error is not None:
            raise self.error
        return self.found


class _Usage:
    def usage_of(self, tenant: str, *, excluding: str | None = None) -> GpuAmount:
        return GpuAmount(total=8, by_model={"h100": 8})


def _gather(door: _Door, request: AdmissionRequest, tenant: str | None = "vision") -> PolicyInput:
    class _Tenants(_Inventory):
        def tenant_of(self, namespace: str) -> str | None:
            return tenant

    reader = ScaledWorkloads(cast(KubeApi, door), timeout=0.5)
    gatherer = FactGatherer(
        inventory=_Tenants(), scaled_workloads=reader, tenant_facts=TenantFacts(gpu_usage=_Usage())
    )
    policy_input, _, _ = asyncio.run(gatherer.gather(request))
    return policy_input


def test_a_scale_up_gets_the_workloads_pod_templates_and_the_usage() -> None:
    door = _Door(found=_deployment(0))
    policy_input = _gather(door, _scale(0, 5))
    scaled = policy_input["scaled_workload"]
    assert scaled["kind"] == "Deployment"
    assert [(t["path"], t["spec"]) for t in scaled["pod_templates"]] == [("spec.template.spec", _SPEC)]
    assert policy_input["gpu_usage"] == {"total": 8, "by_model": {"h100": 8}}
    # One GET of the workload, by name, through the door, with the reader's bound.
    assert door.asked == [("/apis/apps/v1/namespaces/vision/deployments/serve", "serve", "vision", 0.5)]


def test_a_statefulset_scale_up_reads_the_statefulset() -> None:
    door = _Door(found={**_deployment(0), "kind": "StatefulSet"})
    assert _gather(door, _scale(0, 2, "statefulsets"))["scaled_workload"]["kind"] == "StatefulSet"
    assert door.asked[0][0] == "/apis/apps/v1/namespaces/vision/statefulsets/serve"


@pytest.mark.parametrize(("old", "new"), [(5, 2), (3, 3)])
def test_a_scale_down_or_to_the_same_count_reads_nothing(old: int, new: int) -> None:
    door = _Door(found=_deployment(old))
    policy_input = _gather(door, _scale(old, new))
    assert "scaled_workload" not in policy_input
    assert "gpu_usage" not in policy_input
    assert door.asked == []


def test_a_scale_outside_a_tenant_reads_nothing() -> None:
    door = _Door(found=_deployment(0))
    assert "scaled_workload" not in _gather(door, _scale(0, 5), tenant=None)
    assert door.asked == []


@pytest.mark.parametrize(
    ("door", "error"),
    [
        (_Door(found=None), "no Deployment 'serve' in namespace 'vision'"),
        (_Door(error=ApiException(status=403, reason="Forbidden")), "the API answered 403 Forbidden"),
        (_Door(error=OSError("connection reset")), "the API did not answer: OSError"),
    ],
)
def test_a_workload_that_cannot_be_read_is_said_so_the_policy_refuses(door: _Door, error: str) -> None:
    assert _gather(door, _scale(0, 5))["scaled_workload"] == {"kind": "Deployment", "error": error}


def test_a_slow_read_is_not_waited_for_and_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    class _Slow:
        def fact(self, kind: WorkloadKind, namespace: str, name: str) -> ScaledWorkloadDocument:
            time.sleep(0.5)  # an API slower than the bound
            return {"kind": kind.kind, "pod_templates": []}

    monkeypatch.setattr(facts, "SCALED_WORKLOAD_SECONDS", 0.05)
    gatherer = FactGatherer(
        inventory=_Inventory(), scaled_workloads=_Slow(), tenant_facts=TenantFacts(gpu_usage=_Usage())
    )
    policy_input, _, _ = asyncio.run(gatherer.gather(_scale(0, 5)))
    assert policy_input["scaled_workload"] == {
        "kind": "Deployment",
        "error": "the API did not answer within 0.05 s",
    }


def test_an_update_of_a_workload_gets_its_old_replica_counts_and_the_usage() -> None:
    request = _update(1, 5)
    policy_input = build_policy_input(request=request)
    assert policy_input["replicas_before"] == {"spec.template.spec": 1}
    assert [t["replicas"] for t in policy_input["pod_templates"]] == [5]
    assert needs_gpu_usage(request, policy_input["pod_templates"])


def test_creates_pods_and_subresources_get_no_old_replica_counts() -> None:
    created = _update(1, 5).with_changes(operation="CREATE", oldObject=None)
    assert "replicas_before" not in build_policy_input(request=created)
    status = _update(1, 5).with_changes(subResource="status")
    assert "replicas_before" not in build_policy_input(request=status)
    assert not needs_gpu_usage(status, build_policy_input(request=status)["pod_templates"])


def test_which_requests_are_scale_ups() -> None:
    assert is_scale_up(_scale(0, 5))
    assert not is_scale_up(_scale(5, 0))
    assert not is_scale_up(_update(0, 5))  # an UPDATE of the workload itself: replicas_before
    assert scaled_kind(_scale(0, 5, "replicasets"), BUILTIN_WORKLOAD_KINDS).kind == "ReplicaSet"  # type: ignore[union-attr]
    assert scaled_kind(_scale(0, 5, "leaderworkersets"), BUILTIN_WORKLOAD_KINDS) is None
