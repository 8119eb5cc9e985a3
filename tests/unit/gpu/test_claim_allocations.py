"""DRA GPUs counted from what the scheduler allocated (labgate.gpu_accounting.claim_allocations) and
settled from it (settle_tenant's `allocations`): the count that decides is the count the cluster
allocated, even when a claim was swapped after its pod was admitted (issue 19, finding 2)."""

from __future__ import annotations

from typing import Any

import pytest

from labgate.gpu_accounting.claim_allocations import (
    AllocatedDevices,
    allocated_amount,
    allocated_devices,
    at_least,
    consumers,
    pod_allocations,
)
from labgate.gpu_accounting.demand import DraDeviceClass, GpuCounting
from labgate.gpu_accounting.ledger import GpuAmount, Ledger, Reservation
from labgate.gpu_accounting.settlement import PodFacts, settle_tenant
from rbac.claim_index import ClaimIndex

CONFIG = GpuCounting(
    dra_device_classes={
        "gpu.nvidia.com": DraDeviceClass(),
        "big.nvidia.com": DraDeviceClass(model="b200", weight=2),
    }
)


def claim(
    requests: list[dict[str, Any]],
    results: list[str] | None,
    pods: tuple[str, ...] = ("pod-1",),
    name: str = "gpus",
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if results is not None:
        status["allocation"] = {
            "devices": {
                "results": [
                    {"request": r, "driver": "gpu.nvidia.com", "pool": "n1", "device": f"gpu-{i}"}
                    for i, r in enumerate(results)
                ]
            }
        }
        status["reservedFor"] = [{"resource": "pods", "name": f"n-{uid}", "uid": uid} for uid in pods]
    return {
        "metadata": {"namespace": "vision", "name": name},
        "spec": {"devices": {"requests": requests}},
        "status": status,
    }


ONE = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
EIGHT = [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8}}]


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (claim(ONE, None), ()),  # not allocated yet: nothing held
        (claim(ONE, ["gpu"]), (AllocatedDevices(model="", count=1, gpus=1),)),
        # swapped after admission: 8 devices allocated is what counts, whatever was judged
        (claim(EIGHT, ["gpu"] * 8), (AllocatedDevices(model="", count=8, gpus=8),)),
        (
            claim(
                [
                    {
                        "name": "any",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "big.nvidia.com"},
                            {"name": "small", "deviceClassName": "gpu.nvidia.com", "count": 2},
                        ],
                    },
                    {"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}},
                ],
                ["any/big", "nic"],
            ),
            (AllocatedDevices(model="b200", count=1, gpus=2),),
        ),
        # older flat requests name their class on the request itself
        (
            claim([{"name": "old", "deviceClassName": "gpu.nvidia.com"}], ["old", "old"]),
            (AllocatedDevices("", 2, 2),),
        ),
    ],
    ids=["unallocated", "one", "swapped-to-eight", "first-available-and-other-class", "flat"],
)
def test_the_gpus_a_claim_holds_are_what_the_scheduler_allocated(
    obj: dict[str, Any], expected: tuple[AllocatedDevices, ...]
) -> None:
    assert allocated_devices(obj, CONFIG) == expected


def test_a_shared_claim_counts_for_each_pod_it_is_reserved_for() -> None:
    shared = claim(ONE, ["gpu"], pods=("a", "b"))
    assert consumers(shared) == ["a", "b"]
    assert pod_allocations([shared, claim(ONE, None, name="idle")], CONFIG) == {
        "a": (AllocatedDevices("", 1, 1),),
        "b": (AllocatedDevices("", 1, 1),),
    }
    assert allocated_amount(
        [AllocatedDevices("", 8, 8), AllocatedDevices("b200", 1, 2)], "h100"
    ) == GpuAmount(total=10, by_model={"h100": 8, "b200": 1})
    assert at_least(GpuAmount(1, {"h100": 1}), GpuAmount(8, {"h100": 8})) == GpuAmount(8, {"h100": 8})
    assert at_least(GpuAmount(4, {"h100": 4}), GpuAmount(2, {"a100": 2})) == GpuAmount(
        4, {"h100": 4, "a100": 2}
    )


def _pod(gpus: GpuAmount | None = None) -> PodFacts:
    return PodFacts(
        namespace="vision",
        name="train",
        phase="Running",
        gpus=gpus or GpuAmount(),
        is_preemptible=False,
        whole_model="h100",
    )


def _settle(
    ledger: Ledger, settled: dict[str, GpuAmount], allocations: dict[str, Any]
) -> tuple[Ledger, dict[str, GpuAmount]]:
    pods = {"pod-1": _pod()}
    result = settle_tenant(
        ledger,
        settled,
        seen=pods,
        tenant_pods=pods,
        looked_up={},
        gone_pod_uids=(),
        now=100.0,
        allocations=allocations,
    )
    return result.ledger, result.settled


def test_a_settled_pod_counts_what_its_claims_were_allocated_not_what_was_judged() -> None:
    # Admitted against a 1-device claim; the claim was swapped and the scheduler allocated 8.
    eight = pod_allocations([claim(EIGHT, ["gpu"] * 8)], CONFIG)
    ledger, settled = _settle(Ledger(tenant="vision"), {"pod-1": GpuAmount(1, {"h100": 1})}, eight)
    assert settled == {"pod-1": GpuAmount(8, {"h100": 8})}
    assert ledger.settled == GpuAmount(8, {"h100": 8})

    # A reservation being settled is raised the same way.
    reserved = Ledger(
        tenant="vision", reservations={"pod-1": Reservation(gpus=GpuAmount(1, {"h100": 1}), expires=200)}
    )
    ledger, settled = _settle(reserved, {}, eight)
    assert settled == {"pod-1": GpuAmount(8, {"h100": 8})}
    assert ledger.settled.total == 8

    # What the pod was judged for stays while nothing (or less) is allocated yet.
    _, settled = _settle(Ledger(tenant="vision"), {"pod-1": GpuAmount(1, {"h100": 1})}, {})
    assert settled == {"pod-1": GpuAmount(1, {"h100": 1})}


def test_a_pod_whose_gpus_come_only_from_claims_is_recounted_from_its_allocation() -> None:
    # No record and no reservation (the store was lost): its spec asks nothing, its claim holds 8.
    ledger, settled = _settle(
        Ledger(tenant="vision"), {}, pod_allocations([claim(EIGHT, ["gpu"] * 8)], CONFIG)
    )
    assert settled == {"pod-1": GpuAmount(8, {"h100": 8})}
    assert ledger.settled.total == 8


def test_the_claim_index_queues_the_tenant_of_a_claim_that_changes() -> None:
    queued: list[str] = []
    index = ClaimIndex(CONFIG, tenant_of={"vision": "team-v"}.get, on_tenant=queued.append)
    index.on_list([claim(ONE, None)])
    assert index.allocations() == {}
    assert queued == []
    index.on_event("MODIFIED", claim(EIGHT, ["gpu"] * 8))
    assert index.allocations() == {"pod-1": (AllocatedDevices("", 8, 8),)}
    assert queued == ["team-v"]
    index.on_event("MODIFIED", claim(EIGHT, ["gpu"] * 8))  # nothing changed: nothing queued
    assert queued == ["team-v"]
    index.on_event("DELETED", claim(EIGHT, ["gpu"] * 8))
    assert index.allocations() == {}
    assert queued == ["team-v", "team-v"]
