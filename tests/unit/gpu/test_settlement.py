"""Settling a tenant's GPU reservations against the pods the reconciler sees (pure, by tables)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from labgate.gpu_accounting.ledger import GpuAmount, Ledger, Reservation
from labgate.gpu_accounting.settlement import (
    PodAddress,
    PodFacts,
    expired_unseen,
    recount_message,
    recounted,
    settle_tenant,
    uids_to_watch,
    unrecorded,
)

H100x4 = GpuAmount(total=4, by_model={"h100": 4})
A100x2 = GpuAmount(total=2, by_model={"a100": 2})
NONE = GpuAmount()
NOW = 100.0


def pod(
    phase: str = "Running",
    gpus: GpuAmount = H100x4,
    *,
    preemptible: bool = False,
    name: str = "p",
    gated: bool = False,
) -> PodFacts:
    return PodFacts(
        namespace="vision", name=name, phase=phase, gpus=gpus, is_preemptible=preemptible, is_gated=gated
    )


def book(**reservations: Reservation) -> Ledger:
    return Ledger(tenant="vision", reservations=reservations)


def test_the_pods_to_watch_are_the_reserved_and_the_settled() -> None:
    # A reservation is keyed by its pod's uid (the ledger's earlier pod_uid field is gone).
    ledger = book(u1=Reservation(gpus=H100x4, expires=200), u2=Reservation(gpus=H100x4))
    assert uids_to_watch(ledger, {"s1": A100x2}) == {"u1", "u2", "s1"}


@pytest.mark.parametrize(
    ("reservation", "seen", "expected"),
    [
        (Reservation(gpus=H100x4, expires=50, pod="vision/p"), set(), [PodAddress("u", "vision", "p")]),
        (Reservation(gpus=H100x4, expires=50, pod="vision/p"), {"u"}, []),  # the watch shows it
        (Reservation(gpus=H100x4, expires=500, pod="vision/p"), set(), []),  # not expired yet
        (Reservation(gpus=H100x4, expires=50), set(), []),  # no pod named: nothing to read
    ],
    ids=["expired-unseen", "seen", "not-expired", "no-pod-named"],
)
def test_expired_reservations_whose_pod_the_watch_does_not_show_are_read(
    reservation: Reservation, seen: set[str], expected: list[PodAddress]
) -> None:
    assert expired_unseen(book(u=reservation), seen, now=NOW) == expected


@pytest.mark.parametrize(
    ("facts", "settled", "reserved", "expected"),
    [
        (pod(), {}, False, {"u": H100x4}),
        (pod(), {"u": H100x4}, False, {}),  # has a record
        (pod(), {}, True, {}),  # has a reservation
        (pod(gpus=NONE), {}, False, {}),  # asks no GPUs
        (pod(preemptible=True), {}, False, {}),  # preemptible pods are never counted
        (pod("Pending", gated=True), {}, False, {}),  # behind Kueue's gate: holds nothing yet
    ],
    ids=["unrecorded", "settled", "reserved", "no-gpus", "preemptible", "gated"],
)
def test_unrecorded_pods_are_live_gpu_pods_with_neither_record_nor_reservation(
    facts: PodFacts, settled: dict[str, GpuAmount], reserved: bool, expected: dict[str, GpuAmount]
) -> None:
    ledger = book(u=Reservation(gpus=H100x4, expires=200)) if reserved else book()
    assert unrecorded(ledger, settled, {"u": facts}) == expected


@dataclass(frozen=True)
class Case:
    reservation: Reservation
    seen: dict[str, PodFacts] = field(default_factory=dict)
    looked_up: dict[str, str] = field(default_factory=dict)
    gone: tuple[str, ...] = ()
    settled_after: dict[str, GpuAmount] = field(default_factory=dict)
    kept: tuple[str, ...] = ()


COMING = Reservation(gpus=H100x4, expires=200)
EXPIRED = Reservation(gpus=H100x4, expires=50)
SETTLING_CASES = {
    "running pod settles": Case(COMING, seen={"u": pod()}, settled_after={"u": H100x4}),
    "pod on its way waits": Case(COMING, kept=("u",)),
    "finished pod is dropped": Case(COMING, seen={"u": pod("Succeeded")}),
    "expired and never seen": Case(EXPIRED),
    "expired, read from the API": Case(EXPIRED, looked_up={"u": "Pending"}, settled_after={"u": H100x4}),
    "seen deleted before expiry": Case(COMING, gone=("u",)),
    # Issue 20: a reservation made when Kueue's gate removal was admitted, its pod still shown gated
    # (a lagging watch, or an update that failed and that Kueue retries): kept, expired or not,
    # never settled while the pod cannot be scheduled; settled once it shows ungated.
    "gate removal not seen yet": Case(COMING, seen={"u": pod("Pending", gated=True)}, kept=("u",)),
    "gate removal long unseen": Case(EXPIRED, seen={"u": pod("Pending", gated=True)}, kept=("u",)),
    "gate removed": Case(EXPIRED, seen={"u": pod("Pending")}, settled_after={"u": H100x4}),
    "gated pod deleted": Case(COMING, seen={"u": pod("Failed", gated=True)}),
}


@pytest.mark.parametrize("case", SETTLING_CASES.values(), ids=SETTLING_CASES.keys())
def test_settling_a_reservation(case: Case) -> None:
    result = settle_tenant(
        book(u=case.reservation),
        {},
        seen=case.seen,
        tenant_pods={},
        looked_up=case.looked_up,
        gone_pod_uids=case.gone,
        now=NOW,
    )
    assert result.settled == case.settled_after
    assert tuple(result.ledger.reservations) == case.kept
    assert result.is_settled_changed is bool(case.settled_after)


def test_settled_pods_that_finished_or_vanished_go_and_the_sum_follows() -> None:
    result = settle_tenant(
        Ledger(tenant="vision", settled=GpuAmount(total=8, by_model={"h100": 8})),
        {"run": H100x4, "done": H100x4, "gone": A100x2},
        seen={"run": pod(), "done": pod("Failed")},
        tenant_pods={},
        looked_up={},
        gone_pod_uids=(),
        now=NOW,
    )
    assert result.settled == {"run": H100x4}
    assert result.ledger.settled == H100x4
    assert result.is_settled_changed


def test_live_pods_nobody_counted_are_recorded_and_reported_as_recounted() -> None:
    tenant_pods = {"lost": pod(name="lost"), "done": pod("Succeeded", name="done")}
    result = settle_tenant(
        book(), {}, seen={}, tenant_pods=tenant_pods, looked_up={}, gone_pod_uids=(), now=NOW
    )
    assert result.unrecorded == {"lost": H100x4, "done": H100x4}
    assert result.settled == {"lost": H100x4}
    assert recounted(result) == ["lost"]


def test_a_pod_behind_kueues_gate_holds_nothing_until_the_webhook_reserves_at_its_removal() -> None:
    """Issue 20: a gated pod is neither recounted from its spec nor kept in the settled sum (a record
    made before the webhook reserved at the gate's removal, for a pod reserved at its CREATE)."""
    gated = pod("Pending", name="queued", gated=True)
    result = settle_tenant(
        Ledger(tenant="vision", settled=H100x4 + H100x4),
        {"old": H100x4, "run": H100x4},
        seen={"old": gated, "run": pod()},
        tenant_pods={"old": gated, "run": pod(), "new": gated},
        looked_up={},
        gone_pod_uids=(),
        now=NOW,
    )
    assert result.unrecorded == {}
    assert result.settled == {"run": H100x4}
    assert result.ledger.settled == H100x4
    assert recounted(result) == []


def test_an_unchanged_tenant_settles_to_itself() -> None:
    ledger = Ledger(tenant="vision", settled=H100x4)
    result = settle_tenant(
        ledger,
        {"u": H100x4},
        seen={"u": pod()},
        tenant_pods={"u": pod()},
        looked_up={},
        gone_pod_uids=(),
        now=NOW,
    )
    assert (result.ledger, result.settled, result.is_settled_changed) == (ledger, {"u": H100x4}, False)


@pytest.mark.parametrize(
    ("names", "shown"),
    [
        (["vision/b", "vision/a"], "vision/a, vision/b"),
        (
            [f"vision/p{i}" for i in range(7)],
            "vision/p0, vision/p1, vision/p2, vision/p3, vision/p4 and 2 more",
        ),
    ],
)
def test_the_recount_message_names_five_pods_at_most(names: list[str], shown: str) -> None:
    assert recount_message(names, pods=len(names), gpus=8, tenant="vision") == (
        f"counted {len(names)} running GPU pods (8 GPUs) from their specs: they had no record in "
        f"the settled-pods store (labgate-gpu-settled.vision.*) and no reservation: {shown}"
    )


def test_settling_sums_what_the_tenants_live_pods_ask_for_tenant_quota() -> None:
    """Ledger.workloads (the tenant-quota rule's usage): every live pod of the tenant's namespaces,
    GPU or not, preemptible or not; finished pods not."""
    cpu_pod = PodFacts(
        "vision", "prep", "Running", NONE, False, requests={"cpu": 2000, "memory": 1 << 30, "pods": 1}
    )
    preemptible = PodFacts("vision-b", "spot", "Pending", H100x4, True, requests={"cpu": 500, "pods": 1})
    done = PodFacts("vision", "old", "Succeeded", NONE, False, requests={"cpu": 8000, "pods": 1})
    settlement = settle_tenant(
        Ledger(tenant="vision"),
        {},
        seen={},
        tenant_pods={"c": cpu_pod, "p": preemptible, "d": done},
        looked_up={},
        gone_pod_uids=(),
        now=NOW,
    )
    assert settlement.workloads == {"cpu": 2500, "memory": 1 << 30, "pods": 2}
    assert settlement.ledger.workloads == {}  # the controller writes it with the ledger
