"""Before a gpu-quota refusal stands, the webhook counts the tenant's usage again from the API
(webhook.usage_recount): a pod whose deletion the API finished no longer counts, even while the
ledger still sums it; the count never admits beyond the quota, and a failed count keeps the refusal."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any, cast

from labgate.core.api_resources import Kind
from labgate.core.gpu_amount import GpuAmount
from labgate.core.kube import KubeApi
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.ledger import Ledger, LedgerConflictError, usage, with_reservation
from tests.unit.gpu.test_gpu_batch import TENANT, Inventory, Ledgers, QuotaPolicy, request
from webhook.replica import FactSources, admission_server
from webhook.serving import AdmissionServer
from webhook.usage_recount import RECOUNT_SECONDS, UsageRecount


class Pods:
    """The API's pods of the tenant's namespace (KubeApi.list); `broken` makes every list fail."""

    def __init__(self, pods: list[dict[str, Any]], *, broken: bool = False):
        self.pods, self.broken, self.lists = pods, broken, 0

    def list(self, kind: Kind, *, namespace: str | None = None, timeout: float = 10) -> dict[str, Any]:
        self.lists += 1
        if self.broken:
            raise OSError("the apiserver did not answer")
        return {"items": [p for p in self.pods if p["metadata"]["namespace"] == namespace]}

    def pages(
        self, kind: Kind, *, namespace: str | None = None, timeout: float = 10
    ) -> Iterator[dict[str, Any]]:
        """The list in pages of two pods, as KubeApi.pages reads it."""
        items = self.list(kind, namespace=namespace, timeout=timeout)["items"]
        yield from ({"items": items[i : i + 2]} for i in range(0, max(len(items), 1), 2))


def live_pod(uid: str, gpus: int) -> dict[str, Any]:
    return {
        "metadata": {"uid": uid, "name": uid, "namespace": TENANT},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
            "nodeSelector": {"nvidia.com/gpu.product": "h100"},
        },
        "status": {"phase": "Running"},
    }


def server_with(
    ledgers: Ledgers, pods: Pods, policy: QuotaPolicy, *, timeout: float = RECOUNT_SECONDS
) -> AdmissionServer:
    recount = UsageRecount(
        cast(KubeApi, pods),
        ledgers.fresh,
        lambda tenant: [TENANT],
        GpuCounting(),
        cached_ledger=ledgers.cached,
        timeout=timeout,
    )
    return admission_server(
        policy, FactSources(inventory=Inventory(), ledgers=ledgers, usage_recount=recount)
    )


class CasLedgers(Ledgers):
    """The in-memory ledger store, whose compare-and-swap fails on a version it no longer holds."""

    def write(self, ledger: Ledger) -> Ledger:
        if ledger.resource_version != self.stored.resource_version:
            raise LedgerConflictError(TENANT)
        return super().write(ledger)


def ledger_summing(settled: int) -> CasLedgers:
    """A ledger whose settled sum still counts `settled` GPUs (the reconciler has not released yet)."""
    ledgers = CasLedgers()
    ledgers.stored = Ledger(
        tenant=TENANT, resource_version="1", settled=GpuAmount(settled, {"h100": settled})
    )
    return ledgers


def test_a_pod_the_api_deleted_does_not_refuse_the_next_and_the_quota_still_holds() -> None:
    # Quota 16; the ledger sums two pods of 8, but the API has one left (p2 was deleted).
    ledgers, pods = ledger_summing(16), Pods([live_pod("p1", 8)])
    server = server_with(ledgers, pods, QuotaPolicy(total=16, models={}))

    async def create_two() -> list[bool]:
        first = await server.validate(request(2, "h100", 8))
        second = await server.validate(request(3, "h100", 8))
        return [first.response.allowed, second.response.allowed]

    assert asyncio.run(create_two()) == [True, False]
    # The new pod is reserved against the ledger version the count was made at; nothing beyond.
    assert usage(ledgers.stored) == GpuAmount(
        24, {"h100": 24}
    )  # the settled sum is the reconciler's to lower
    assert ledgers.writes == 1


def test_the_count_is_made_only_for_a_refusal_by_the_quota() -> None:
    ledgers, pods = ledger_summing(0), Pods([])
    server = server_with(ledgers, pods, QuotaPolicy(total=16, models={}))
    assert asyncio.run(server.validate(request(1, "h100", 8))).response.allowed
    assert pods.lists == 0


def test_a_count_that_fails_keeps_the_refusal() -> None:
    ledgers, pods = ledger_summing(16), Pods([live_pod("p1", 8)], broken=True)
    server = server_with(ledgers, pods, QuotaPolicy(total=16, models={}))
    response = asyncio.run(server.validate(request(2, "h100", 8))).response
    assert not response.allowed
    assert "[gpu-quota]" in (response.status.message if response.status else "")
    assert ledgers.writes == 0


def test_a_ledger_changed_after_the_count_is_decided_at_its_own_sum() -> None:
    # The count was made at version 1; another replica's reservation then lands (version 2): the
    # compare-and-swap against version 1 fails and the pod is decided at version 2's sum, refused.
    ledgers, pods = ledger_summing(16), Pods([live_pod("p1", 8)])
    fresh = ledgers.fresh

    def fresh_then_raced(tenant: str) -> Ledger:
        read = fresh(tenant)
        ledgers.stored = read.model_copy(update={"resource_version": "2"})
        return read

    ledgers.fresh = fresh_then_raced  # type: ignore[method-assign]
    server = server_with(ledgers, pods, QuotaPolicy(total=16, models={}))
    response = asyncio.run(server.validate(request(2, "h100", 8))).response
    assert not response.allowed
    assert ledgers.writes == 0
    assert "[gpu-quota]" in (response.status.message if response.status else "")


H100x8 = GpuAmount(8, {"h100": 8})


def ledger_reserving_a_pod_not_listed() -> CasLedgers:
    """Quota 16: p1 (8) settled, and a reservation of 8 for pod "gone", which the API does not list:
    a pod created and deleted before the reconciler settled it, or one not created yet."""
    ledgers = ledger_summing(8)
    ledgers.stored = with_reservation(ledgers.stored, "gone", H100x8, now=time.time(), pod=f"{TENANT}/gone")
    return ledgers


class ReleasingPods(Pods):
    """The reconciler, which saw pod "gone" deleted, releases its reservation right after the first
    count listed the pods (the ledger's next version, as this replica's watch shows it)."""

    def __init__(self, pods: list[dict[str, Any]], ledgers: Ledgers):
        super().__init__(pods)
        self.ledgers = ledgers

    def list(self, kind: Kind, *, namespace: str | None = None, timeout: float = 10) -> dict[str, Any]:
        listed = super().list(kind, namespace=namespace, timeout=timeout)
        if self.lists == 1:
            self.ledgers.stored = self.ledgers.stored.model_copy(
                update={"reservations": {}, "resource_version": "2"}
            )
        return listed


# Issue 28 item 4: a pod created and deleted before it was settled refused the next one.
def test_a_refusal_by_the_reservation_of_a_pod_not_listed_waits_for_the_reconcilers_release() -> None:
    ledgers = ledger_reserving_a_pod_not_listed()
    pods = ReleasingPods([live_pod("p1", 8)], ledgers)
    server = server_with(ledgers, pods, QuotaPolicy(total=16, models={}))
    response = asyncio.run(server.validate(request(2, "h100", 8))).response
    assert response.allowed
    assert pods.lists == 2  # counted again once the ledger changed
    assert ledgers.writes == 1  # reserved against the released version, "2"
    assert usage(ledgers.stored) == GpuAmount(16, {"h100": 16})


def test_a_reservation_of_a_pod_on_its_way_still_refuses_once_the_wait_is_over() -> None:
    ledgers = ledger_reserving_a_pod_not_listed()  # the ledger never changes: the pod is on its way
    pods = Pods([live_pod("p1", 8)])
    server = server_with(ledgers, pods, QuotaPolicy(total=16, models={}), timeout=0.2)
    response = asyncio.run(server.validate(request(2, "h100", 8))).response
    assert not response.allowed
    assert "[gpu-quota] uses 16" in (response.status.message if response.status else "")
    assert (pods.lists, ledgers.writes) == (1, 0)


def test_no_wait_when_the_pods_listed_alone_refuse() -> None:
    """p1 and p2 fill the quota: the release of "gone" would not admit, so the refusal is not held
    for it (a count after the release would list the pods a second time)."""
    ledgers = ledger_reserving_a_pod_not_listed()
    ledgers.stored = ledgers.stored.model_copy(update={"settled": GpuAmount(16, {"h100": 16})})
    pods = ReleasingPods([live_pod("p1", 8), live_pod("p2", 8)], ledgers)
    server = server_with(ledgers, pods, QuotaPolicy(total=16, models={}))
    response = asyncio.run(server.validate(request(3, "h100", 8))).response
    assert not response.allowed
    assert pods.lists == 1
