"""What kind of request it is, answered once (webhook.request_class.classify): each answer the
admission path reads, for the requests that need it, and nothing for those that do not."""

from __future__ import annotations

from typing import Any

import pytest

from labgate.gpu_accounting.pod_gpus import KUEUE_ADMISSION_GATE
from webhook.admission import build_policy_input
from webhook.request_class import RequestClass, classify
from webhook.review import AdmissionRequest, parse_request


def _request(
    group: str, kind: str, operation: str, obj: Any, old: Any = None, *, sub_resource: str | None = None
) -> AdmissionRequest:
    resource = {"group": group, "version": "v1", "resource": kind.lower() + "s"}
    return parse_request(
        {
            "uid": "request-uid",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "resource": resource,
            "subResource": sub_resource,
            "namespace": "vision",
            "name": "x",
            "operation": operation,
            "userInfo": {"username": "alice"},
            "object": obj,
            "oldObject": old,
        }
    )


def _pod(*, uid: str | None = "pod-uid", gated: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "x", **({"uid": uid} if uid else {})}
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "trainer:v1"}]}
    if gated:
        spec["schedulingGates"] = [{"name": KUEUE_ADMISSION_GATE}]
    return {"metadata": metadata, "spec": spec}


def _classified(request: AdmissionRequest) -> RequestClass:
    return classify(request, build_policy_input(request=request)["pod_templates"])


def test_a_pod_create_takes_gpus_now_under_its_uid() -> None:
    answer = _classified(_request("", "Pod", "CREATE", _pod()))
    assert (answer.is_pod_create, answer.takes_gpus_now, answer.needs_gpu_usage) == (True, True, True)
    assert answer.reservation_key == "pod-uid"
    assert not answer.is_gate_removal
    # Without a uid (never from a real apiserver): a key no pod can have, never the pod's name.
    assert (
        _classified(_request("", "Pod", "CREATE", _pod(uid=None))).reservation_key == "no-pod-uid/request-uid"
    )


def test_removing_kueues_gate_takes_gpus_now_and_keeping_it_does_not() -> None:
    removal = _classified(_request("", "Pod", "UPDATE", _pod(), _pod(gated=True)))
    assert (removal.is_gate_removal, removal.takes_gpus_now, removal.needs_gpu_usage) == (True, True, True)
    kept = _classified(_request("", "Pod", "UPDATE", _pod(gated=True), _pod(gated=True)))
    assert (kept.is_gate_removal, kept.takes_gpus_now, kept.needs_gpu_usage) == (False, False, False)


@pytest.mark.parametrize(("before", "after", "up"), [(1, 4, True), (4, 1, False), (2, 2, False)])
def test_only_a_scale_up_needs_the_usage(before: int, after: int, up: bool) -> None:
    request = _request(
        "batch",
        "Job",
        "UPDATE",
        {"spec": {"replicas": after}},
        {"spec": {"replicas": before}},
        sub_resource="scale",
    )
    answer = _classified(request)
    assert (answer.is_scale_up, answer.needs_gpu_usage, answer.takes_gpus_now) == (up, up, False)


@pytest.mark.parametrize(("operation", "update", "write"), [("CREATE", False, True), ("UPDATE", True, True)])
def test_tenant_writes(operation: str, update: bool, write: bool) -> None:
    tenant = {"metadata": {"name": "vision"}, "spec": {}}
    answer = _classified(_request("labgate.io", "Tenant", operation, tenant, tenant if update else None))
    assert (answer.is_tenant_update, answer.is_tenant_write, answer.takes_gpus_now) == (update, write, False)
    status = _request("labgate.io", "Tenant", "UPDATE", tenant, tenant, sub_resource="status")
    assert not _classified(status).is_tenant_write


def test_claims_and_volumes_are_named_once() -> None:
    claim = {"metadata": {"name": "gpus"}, "spec": {}}
    deleted = _classified(_request("resource.k8s.io", "ResourceClaim", "DELETE", None, claim))
    assert deleted.swapped_claim == ("ResourceClaim", "x")
    volume_claim = {"metadata": {"name": "data"}, "spec": {"volumeName": "pv-1"}}
    assert _classified(_request("", "PersistentVolumeClaim", "CREATE", volume_claim)).claimed_volume == "pv-1"
    plain = _classified(_request("", "Pod", "CREATE", _pod()))
    assert (plain.swapped_claim, plain.claimed_volume) == (None, None)
