"""The Tenant status the reconciler writes, and when it writes nothing (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from labgate.core.tenant import Tenant
from labgate.gpu_accounting.ledger import GpuAmount
from rbac.tenant_status import PodCounts, is_unchanged, shown_usage, tenant_status, with_transition_time

TENANT = Tenant.from_object(
    {
        "metadata": {"name": "vision", "generation": 4},
        "spec": {
            "members": {},
            "namespaces": {"names": ["vision"]},
            "gpu": {"total": 8, "models": {"h100": 8}},
        },
    }
)
H100x2 = GpuAmount(total=2, by_model={"h100": 2})


def written(phases: dict[str, str], gpus: GpuAmount = H100x2) -> dict[str, Any]:
    status, condition = tenant_status(TENANT, ["vision", "vision-b"], phases, gpus, PodCounts(0, 1))
    return {**status, "conditions": [with_transition_time(condition, {}, "2026-12-01T00:00:00Z")]}


def test_the_status_shows_namespaces_readiness_and_gpus() -> None:
    status = written({"vision": "Active"})
    assert status["namespaces"] == [
        {"name": "vision", "state": "Active"},
        {"name": "vision-b", "state": "Pending"},
    ]
    assert status["conditions"][0]["reason"] == "NamespacesPending"
    assert status["gpu"] == {
        "used": 2,
        "usedByModel": {"h100": 2},
        "summary": "h100 2/8, total 2/8",
        "preemptible": 0,
        "pendingPods": 1,
        "heldByUnscheduled": 0,
    }
    assert "usedByModel" not in written({}, GpuAmount())["gpu"]  # an empty map is left out


@pytest.mark.parametrize(
    ("phases", "gpus", "expected"),
    [
        ({"vision": "Active"}, H100x2, True),
        ({"vision": "Active", "vision-b": "Active"}, H100x2, False),  # became Ready
        ({"vision": "Active"}, GpuAmount(total=3, by_model={"h100": 3}), False),  # usage moved
    ],
    ids=["same", "ready", "usage"],
)
def test_an_unchanged_status_is_not_written_again(
    phases: dict[str, str], gpus: GpuAmount, expected: bool
) -> None:
    old = written({"vision": "Active"})
    status, condition = tenant_status(TENANT, ["vision", "vision-b"], phases, gpus, PodCounts(0, 1))
    assert is_unchanged(status, condition, old) is expected


def test_the_transition_time_stays_while_readiness_does() -> None:
    old = written({"vision": "Active"})
    _, same = tenant_status(TENANT, ["vision", "vision-b"], {"vision": "Active"}, H100x2, PodCounts(0, 0))
    _, ready = tenant_status(
        TENANT, ["vision", "vision-b"], {"vision": "Active", "vision-b": "Active"}, H100x2, PodCounts(0, 0)
    )
    assert with_transition_time(same, old, "later")["lastTransitionTime"] == "2026-12-01T00:00:00Z"
    assert with_transition_time(ready, old, "later")["lastTransitionTime"] == "later"


def test_while_the_ledger_is_unreadable_the_shown_usage_is_kept() -> None:
    assert shown_usage({"status": written({})}) == H100x2
    assert shown_usage({}) == GpuAmount()


# Issue 22 item 6: "uses 16 of 16" did not say that 8 of them were held by a pod still waiting for a node.
def test_gpus_held_by_pods_not_yet_scheduled_are_shown_apart() -> None:
    waiting = PodCounts(0, 1, unscheduled=(("gpu-experiment-dzjhx", 8),))
    status, _ = tenant_status(TENANT, ["vision"], {"vision": "Active"}, GpuAmount(8, {"h100": 8}), waiting)
    assert status["gpu"]["heldByUnscheduled"] == 8
    assert status["gpu"]["unscheduledPods"] == ["gpu-experiment-dzjhx"]
    assert status["gpu"]["summary"] == (
        "h100 8/8, total 8/8; 8 held by 1 pod not yet scheduled: gpu-experiment-dzjhx"
    )
    # Once it is bound, the status changes (and is written again).
    bound, condition = tenant_status(
        TENANT, ["vision"], {"vision": "Active"}, GpuAmount(8, {"h100": 8}), PodCounts(0, 0)
    )
    assert "unscheduledPods" not in bound["gpu"]
    assert not is_unchanged(bound, condition, status)


def test_many_waiting_pods_are_counted_and_the_first_named() -> None:
    from rbac.tenant_view import held_text

    assert held_text(16, ["a", "b", "c", "d"]) == "16 held by 4 pods not yet scheduled: a, b, c, ..."
    assert held_text(0, []) == ""


# Issue 22 item 6: what the nodes of the pools hold, and QuotaFitsPools, written when they change.
def test_the_pools_and_their_condition_are_written_when_they_change() -> None:
    pools = {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}
    fits = {"type": "QuotaFitsPools", "status": "True", "observedGeneration": 4, "reason": "PoolsHoldQuota"}
    status, ready = tenant_status(
        TENANT, ["vision"], {"vision": "Active"}, H100x2, PodCounts(0, 0), pools=pools
    )
    assert status["gpu"]["pools"] == pools
    old = {**status, "conditions": [with_transition_time(c, {}, "t0") for c in (ready, fits)]}
    assert is_unchanged(status, [ready, fits], old)
    # The quota now beyond the pools: the condition flips, with a new transition time.
    beyond = {**fits, "status": "False", "reason": "QuotaBeyondPools"}
    assert not is_unchanged(status, [ready, beyond], old)
    assert with_transition_time(beyond, old, "t1")["lastTransitionTime"] == "t1"
    assert with_transition_time(ready, old, "t1")["lastTransitionTime"] == "t0"
    # labgate can no longer tell (the pools were removed): the pools and the condition go.
    unknown, _ = tenant_status(TENANT, ["vision"], {"vision": "Active"}, H100x2, PodCounts(0, 0))
    assert "pools" not in unknown["gpu"]
    assert not is_unchanged(unknown, [ready], old)
    assert not is_unchanged(status, [ready], old)  # the condition alone gone is a change too


# Issue 28 item 5: where a pod without tolerations can land (status.nodes), written when it changes.
def test_the_open_nodes_are_written_when_they_change() -> None:
    tainted = {"untainted": 0, "tainted": 3, "taintKeys": ["labgate.io/pool", "labgate.io/spot"]}
    status, ready = tenant_status(
        TENANT, ["vision"], {"vision": "Active"}, H100x2, PodCounts(0, 0), nodes=tainted
    )
    assert status["nodes"] == tainted
    old = {**status, "conditions": [with_transition_time(ready, {}, "t0")]}
    assert is_unchanged(status, ready, old)
    # An untainted node came: a change.
    opened, _ = tenant_status(
        TENANT, ["vision"], {"vision": "Active"}, H100x2, PodCounts(0, 0), nodes={**tainted, "untainted": 1}
    )
    assert not is_unchanged(opened, ready, old)
    # A key it no longer says is a change too (a subset of the old status is not enough).
    fewer = {"untainted": 0, "tainted": 3, "taintKeys": ["labgate.io/pool"]}
    narrowed, _ = tenant_status(
        TENANT, ["vision"], {"vision": "Active"}, H100x2, PodCounts(0, 0), nodes=fewer
    )
    assert not is_unchanged(narrowed, ready, {**old, "nodes": {**tainted, "moreTaintKeys": 1}})
    # Unknown (the nodes not listed yet, nothing in the live status): not said.
    unknown, _ = tenant_status(TENANT, ["vision"], {"vision": "Active"}, H100x2, PodCounts(0, 0))
    assert "nodes" not in unknown


def test_a_tenant_listing_a_namespace_another_tenant_holds_is_not_ready_and_says_the_fix() -> None:
    active = {"vision": "Active"}
    _, held = tenant_status(
        TENANT, ["vision"], active, H100x2, PodCounts(0, 0), held_elsewhere={"vision-old": "nlp"}
    )
    assert (held["status"], held["reason"]) == ("False", "NamespaceHeldByAnotherTenant")
    assert "vision-old (labelled for tenant nlp)" in held["message"]
    assert "Fix: remove them from spec.namespaces.names" in held["message"]
    _, ready = tenant_status(TENANT, ["vision"], active, H100x2, PodCounts(0, 0), held_elsewhere={})
    assert (ready["status"], ready["reason"]) == ("True", "Provisioned")
