"""A pod behind Kueue's admission gate and the quota ledger (issue 20): the webhook reserves its GPUs
when the gate is removed (a Pod UPDATE, by Kueue's controller), not when the gated pod is created;
a retried removal replaces its reservation rather than counting the pod twice.

The policy is the quota stand-in of test_gpu_batch (the real Rego, which gives a gated pod's CREATE
no demand, is tested in policies/labgate/rules/gpu_quota/gated_pod_test.rego)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from labgate.core.gpu_amount import GpuAmount
from labgate.gpu_accounting.ledger import Ledger, Reservation, usage
from labgate.gpu_accounting.pod_gpus import is_behind_admission_gate
from tests.unit.gpu.test_gpu_batch import TENANT, Inventory, Ledgers, QuotaPolicy
from webhook.replica import FactSources, admission_server
from webhook.request_class import is_admission_gate_removal, needs_gpu_usage, takes_gpus_now
from webhook.review import AdmissionRequest, parse_request

GATE = {"name": "kueue.x-k8s.io/admission"}
KUEUE = {"username": "system:serviceaccount:kueue-system:kueue-controller-manager", "groups": []}


def _pod(gates: list[dict[str, str]] | None, gpus: int = 4) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": []}
    if gates is not None:
        spec["schedulingGates"] = gates
    return {
        "metadata": {"name": "solo", "uid": "pod-uid", "annotations": {"model": "h100", "gpus": str(gpus)}},
        "spec": spec,
    }


def _request(
    operation: str, new: dict[str, Any], old: dict[str, Any] | None = None, **extra: Any
) -> AdmissionRequest:
    return parse_request(
        {
            "uid": "req",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": TENANT,
            "name": "solo",
            "operation": operation,
            "userInfo": KUEUE,
            "object": new,
            **({"oldObject": old} if old is not None else {}),
            **extra,
        }
    )


REMOVAL = _request("UPDATE", _pod([]), _pod([GATE]))


@pytest.mark.parametrize(
    ("request_", "is_removal"),
    [
        (REMOVAL, True),
        (_request("UPDATE", _pod(None), _pod([GATE, {"name": "other"}])), True),
        (_request("UPDATE", _pod([{"name": "other"}]), _pod([GATE, {"name": "other"}])), True),
        (_request("UPDATE", _pod([GATE]), _pod([GATE])), False),  # still gated
        (_request("UPDATE", _pod([]), _pod([{"name": "other"}])), False),  # not Kueue's gate
        (_request("UPDATE", _pod([]), _pod([])), False),
        (_request("UPDATE", _pod([]), _pod([GATE]), subResource="status"), False),
    ],
    ids=[
        "removed",
        "all-gates-removed",
        "other-gate-stays",
        "still-gated",
        "other-gate",
        "no-gate",
        "status",
    ],
)
def test_a_gate_removal_is_a_pod_update_that_takes_kueues_gate_away(
    request_: AdmissionRequest, *, is_removal: bool
) -> None:
    assert is_admission_gate_removal(request_) is is_removal
    assert takes_gpus_now(request_) is is_removal
    # Judged against the tenant's usage: the policies get it.
    assert needs_gpu_usage(request_, [{"path": "spec"}]) is is_removal


def test_a_gated_pods_create_is_no_removal_and_reserves_what_the_policy_says() -> None:
    created = _request("CREATE", _pod([GATE]))
    assert not is_admission_gate_removal(created)
    assert takes_gpus_now(created)  # a CREATE; the policy's demand is nothing for a gated pod


def test_a_pod_is_behind_the_gate_only_with_kueues_gate() -> None:
    assert is_behind_admission_gate(_pod([{"name": "other"}, GATE]))
    assert not is_behind_admission_gate(_pod([{"name": "other"}]))
    assert not is_behind_admission_gate(_pod(None))
    assert not is_behind_admission_gate(None)


def _validate(ledgers: Ledgers, request_: AdmissionRequest, total: int = 8) -> bool:
    server = admission_server(QuotaPolicy(total, {}), FactSources(inventory=Inventory(), ledgers=ledgers))
    return asyncio.run(server.validate(request_)).response.allowed


def test_removing_the_gate_reserves_the_pods_gpus_by_its_uid() -> None:
    ledgers = Ledgers()
    assert _validate(ledgers, REMOVAL)
    assert usage(ledgers.stored) == GpuAmount(total=4, by_model={"h100": 4})
    assert ledgers.stored.reservations["pod-uid"].pod == f"{TENANT}/solo"


def test_a_removal_beyond_the_free_quota_is_refused_and_reserves_nothing() -> None:
    ledgers = Ledgers()
    ledgers.stored = Ledger(
        tenant=TENANT, resource_version="1", settled=GpuAmount(total=6, by_model={"h100": 6})
    )
    assert not _validate(ledgers, REMOVAL)
    assert ledgers.stored.reservations == {}


def test_a_retried_removal_replaces_its_reservation_and_does_not_count_the_pod_twice() -> None:
    # The first try was admitted and reserved, then the update failed (a conflict); Kueue retries.
    ledgers = Ledgers()
    first = Reservation(gpus=GpuAmount(total=4, by_model={"h100": 4}), expires=0.0, pod=f"{TENANT}/solo")
    ledgers.stored = Ledger(
        tenant=TENANT,
        resource_version="1",
        settled=GpuAmount(total=4, by_model={"h100": 4}),
        reservations={"pod-uid": first},
    )
    assert _validate(ledgers, REMOVAL)  # 4 settled + 4 of its own, not 4 + 4 + 4 > 8
    assert usage(ledgers.stored) == GpuAmount(total=8, by_model={"h100": 8})
    assert ledgers.stored.reservations["pod-uid"].expires > 0.0


@pytest.mark.parametrize(
    "request_",
    [
        _request("UPDATE", _pod([GATE]), _pod([GATE])),  # a label edit while it waits
        _request("UPDATE", _pod([]), _pod([])),  # a running pod's update
        _request("UPDATE", _pod([]), _pod([GATE]), dryRun=True),
    ],
    ids=["still-gated", "running", "dry-run"],
)
def test_other_pod_updates_reserve_nothing(request_: AdmissionRequest) -> None:
    ledgers = Ledgers()
    assert _validate(ledgers, request_)
    assert ledgers.stored.reservations == {}
    assert ledgers.writes == 0
