"""A tenant's GPU usage counted from its live pods and its ledger (labgate.gpu_accounting.live_usage):
the second look before a gpu-quota refusal stands. Never below the truth at the ledger's version."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from labgate.core.gpu_amount import GpuAmount
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.ledger import Ledger, Reservation
from labgate.gpu_accounting.live_usage import LiveCount, count_live, live_usage, unlisted_reservations

NOW = 1_000.0
COUNTING = GpuCounting()


def pod(uid: str, gpus: int, *, phase: str = "Running", gated: bool = False, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        "nodeSelector": {"nvidia.com/gpu.product": "h100"},
        **spec,
    }
    if gated:
        body["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": "ns"},
        "spec": body,
        "status": {"phase": phase},
    }


def ledger(settled: int, **reservations: tuple[int, float]) -> Ledger:
    return Ledger(
        tenant="t",
        resource_version="7",
        settled=GpuAmount(settled, {"h100": settled}),
        reservations={
            uid: Reservation(gpus=GpuAmount(gpus, {"h100": gpus}), expires=expires, pod=f"ns/{uid}")
            for uid, (gpus, expires) in reservations.items()
        },
    )


def test_a_pod_gone_from_the_api_is_not_counted_though_the_ledger_still_sums_it() -> None:
    # The ledger sums two settled pods of 8; the API has only one of them left.
    counted = live_usage(ledger(16), [pod("p1", 8)], COUNTING, now=NOW)
    assert counted == GpuAmount(8, {"h100": 8})


def test_a_reservation_whose_pod_is_not_created_yet_counts_until_it_expires() -> None:
    live = [pod("p1", 8)]
    assert live_usage(ledger(8, p2=(4, NOW + 5)), live, COUNTING, now=NOW) == GpuAmount(12, {"h100": 12})
    assert live_usage(ledger(8, p2=(4, NOW - 1)), live, COUNTING, now=NOW) == GpuAmount(8, {"h100": 8})


def test_the_unlisted_part_is_the_unexpired_reservations_of_pods_the_list_lacks() -> None:
    book = ledger(8, p1=(8, NOW + 5), gone=(2, NOW + 5), coming=(1, NOW + 5), expired=(4, NOW - 1))
    unlisted = unlisted_reservations(book, [pod("p1", 8)], now=NOW)
    assert unlisted == GpuAmount(3, {"h100": 3})
    assert unlisted_reservations(book, [pod(u, 1) for u in ("p1", "gone", "coming")], now=NOW) == GpuAmount()


def test_a_pod_with_a_reservation_is_counted_once() -> None:
    counted = live_usage(ledger(0, p1=(8, NOW + 5)), [pod("p1", 8)], COUNTING, now=NOW)
    assert counted == GpuAmount(8, {"h100": 8})


def test_finished_preemptible_and_gated_pods_hold_nothing_but_a_gate_removal_reserved_does() -> None:
    preemptible = pod("pre", 8, priorityClassName="research-preemptible")
    preemptible["metadata"]["labels"] = {"labgate.io/preemptible": "true"}
    pods = [
        pod("done", 8, phase="Succeeded"),
        preemptible,
        pod("gated", 8, gated=True),
        pod("reserved-gated", 2, gated=True),
    ]
    counted = live_usage(
        ledger(0, done=(8, NOW + 5), **{"reserved-gated": (2, NOW - 100)}), pods, COUNTING, now=NOW
    )
    assert counted == GpuAmount(2, {"h100": 2})


def test_pods_created_around_the_webhook_are_counted_from_their_specs() -> None:
    # Neither settled nor reserved (the webhook was bypassed): the live count is the truth.
    assert live_usage(ledger(0), [pod("p1", 8), pod("p2", 8)], COUNTING, now=NOW) == GpuAmount(
        16, {"h100": 16}
    )


def test_a_tenant_with_a_pod_naming_dra_claims_is_not_counted_here() -> None:
    claimed = pod("p1", 0, resourceClaims=[{"name": "gpu", "resourceClaimName": "c"}])
    assert live_usage(ledger(8), [claimed], COUNTING, now=NOW) is None


def test_one_pass_over_a_stream_of_pages_counts_what_the_two_counts_over_a_list_do() -> None:
    """The webhook counts a tenant's pods as the API's pages come (a generator read once): the usage
    and the unlisted part are those of the whole list."""
    book = ledger(
        8, p1=(8, NOW + 5), gone=(2, NOW + 5), **{"reserved-gated": (2, NOW - 100)}, expired=(4, NOW - 1)
    )
    listed = [
        pod("p1", 8),
        pod("bypassed", 4),
        pod("done", 8, phase="Succeeded"),
        pod("reserved-gated", 2, gated=True),
    ]

    def pages() -> Iterator[dict[str, Any]]:
        for i in range(0, len(listed), 2):
            yield from listed[i : i + 2]

    counted = count_live(book, pages(), COUNTING, now=NOW)
    assert counted == LiveCount(usage=GpuAmount(16, {"h100": 16}), unlisted=GpuAmount(2, {"h100": 2}))
    assert counted.usage == live_usage(book, listed, COUNTING, now=NOW)
    assert counted.unlisted == unlisted_reservations(book, listed, now=NOW)
