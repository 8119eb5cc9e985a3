"""The GPU backstop's count given back on the real apiserver and kube-controller-manager
(rbac/backstop_recount.py): Kubernetes' ResourceQuota admission charges `labgate-gpu` for a create
whose write then fails, and its quota controller would keep that charge until its next periodic
recount (5 minutes); the reconciler gives it back, never below what the pods hold."""

from __future__ import annotations

import time

import pytest

from devcluster.stack import LabgateStack
from tests.e2e.conftest import TenantFactory
from tests.e2e.test_faults import create, gpus_held
from tests.e2e.test_quota import gpu_pod, ledger_data
from tests.e2e.test_reconciler import eventually, get_json

pytestmark = pytest.mark.quota

BACKSTOP_KEY = "requests.nvidia.com/gpu"


def backstop_charge(stack: LabgateStack, namespace: str) -> str | None:
    """What Kubernetes' labgate-gpu quota of `namespace` says is used (its status, as it stores it)."""
    quota = get_json(stack, "resourcequota", "labgate-gpu", "-n", namespace)
    return None if quota is None else ((quota.get("status") or {}).get("used") or {}).get(BACKSTOP_KEY)


def recount_events(stack: LabgateStack, tenant: str) -> list[str]:
    events = get_json(stack, "events", "-n", "default", "--field-selector", "reason=GpuBackstopRecounted")
    assert events is not None
    return [e["message"] for e in events["items"] if e["involvedObject"]["name"] == tenant]


def test_a_charge_for_a_create_that_failed_is_given_back_and_the_next_pod_fits(
    stack: LabgateStack, tenants: TenantFactory
) -> None:
    """A CREATE of a taken name is admitted by labgate and charged by Kubernetes' quota admission
    before the apiserver finds the name taken. The tenant (quota 2) holds 1 GPU; without the
    recount its second GPU pod would be refused `exceeded quota: labgate-gpu` for up to 5 minutes."""
    team = tenants.create(spec_extra={"gpu": {"total": 2}})
    me = team.researcher
    eventually(lambda: backstop_charge(stack, team.namespace) == "0", what="the backstop counted")
    assert create(me, gpu_pod("first", 1), team.namespace).returncode == 0
    taken = create(me, gpu_pod("first", 1), team.namespace)
    assert taken.returncode == 1
    assert "AlreadyExists" in taken.stderr, taken.stderr
    # Kubernetes kept the failed create's charge: 2 charged, 1 held (counted from the pods themselves).
    assert backstop_charge(stack, team.namespace) == "2"
    assert gpus_held(stack, team.namespace) == 1
    started = time.monotonic()
    eventually(
        lambda: backstop_charge(stack, team.namespace) == str(gpus_held(stack, team.namespace)),
        what="the backstop's charge given back to what the pods hold",
        timeout=60,
    )
    given_back_s = time.monotonic() - started
    assert backstop_charge(stack, team.namespace) == "1"
    messages = recount_events(stack, team.name)
    assert any(f"in namespace {team.namespace} charged 2 GPUs; its pods hold 1" in m for m in messages), (
        messages
    )
    # labgate's own reservation for the failed create expires on its own (reservationSeconds).
    eventually(lambda: ledger_data(stack, team.name)["reservations"] == {}, what="reservation released")
    admitted = create(me, gpu_pod("second", 1), team.namespace)
    assert admitted.returncode == 0, admitted.stderr
    # The quota still holds at its edge, by labgate and by Kubernetes alike.
    refused = create(me, gpu_pod("third", 1), team.namespace)
    assert refused.returncode == 1
    assert "[gpu-quota]" in refused.stderr or "exceeded quota: labgate-gpu" in refused.stderr, refused.stderr
    assert gpus_held(stack, team.namespace) == 2
    eventually(lambda: backstop_charge(stack, team.namespace) == "2", what="the backstop counts both pods")
    print(f"BACKSTOP given back {given_back_s:.1f} s after the failed create")
