"""Gathering a request's facts (webhook/facts.py): a pod's DRA claims and its images' facts, the two
facts that may each cost a round trip, are fetched at the same time, not one after the other."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from labgate.core.gpu_amount import GpuAmount
from labgate.gpu_accounting.ledger import Ledger
from labgate.gpu_accounting.pool_capacity import PoolCapacityDocument
from tests.unit.admission.test_serving_volumes import _Inventory
from webhook.facts import FactGatherer
from webhook.policy_input import (
    ClaimFactDocument,
    ClaimUsersDocument,
    HeldDocument,
    ImageFactDocument,
    OpenNodesDocument,
    PolicyInput,
    QueuedDocument,
)
from webhook.read_shares import Read, unshared
from webhook.review import AdmissionRequest, parse_request
from webhook.tenant_facts import TenantFacts, TenantRequests

# Long enough never to fire when both sources run together; short enough to fail fast when not.
MEETING_TIMEOUT = 2.0


_IMAGE: ImageFactDocument = {
    "reference": "registry.lab.example/vision/train:v1",
    "normalized": "registry.lab.example/vision/train:v1",
    "registry": "registry.lab.example",
    "repository": "vision/train",
    "tag": "v1",
    "digest": "sha256:aa",
    "signed_by": [],
    "error": None,
}


class _Meeting:
    """Two sources that each wait, inside their fetch, for the other to have started: fetched one
    after the other, the first waits for ever (here: for MEETING_TIMEOUT, then fails)."""

    def __init__(self) -> None:
        self.claims_started = asyncio.Event()
        self.images_started = asyncio.Event()

    async def for_templates(
        self, namespace: str, pod_templates: list[dict[str, Any]], *, read: Read = unshared
    ) -> dict[str, ClaimFactDocument]:
        self.claims_started.set()
        await asyncio.wait_for(self.images_started.wait(), MEETING_TIMEOUT)
        return {"gpu-claim": {"found": True}}

    async def users_of(self, namespace: str, kind: str, name: str) -> ClaimUsersDocument:
        raise AssertionError("a pod is not a claim")

    async def images_for(
        self,
        *,
        namespace: str,
        tenant_spec: dict[str, Any],
        pod_templates: list[dict[str, Any]],
        timeout: float,
    ) -> dict[str, ImageFactDocument] | None:
        self.images_started.set()
        await asyncio.wait_for(self.claims_started.wait(), MEETING_TIMEOUT)
        return {"registry.lab.example/vision/train:v1": _IMAGE}


class _FailingClaims:
    async def for_templates(
        self, namespace: str, pod_templates: list[dict[str, Any]], *, read: Read = unshared
    ) -> dict[str, ClaimFactDocument]:
        raise OSError("apiserver unreachable")

    async def users_of(self, namespace: str, kind: str, name: str) -> ClaimUsersDocument:
        raise OSError("apiserver unreachable")


def _pod() -> AdmissionRequest:
    return parse_request(
        {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "vision",
            "name": "train",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "groups": ["vision"]},
            "object": {
                "metadata": {"name": "train"},
                "spec": {
                    "containers": [{"name": "main", "image": "registry.lab.example/vision/train:v1"}],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}],
                },
            },
        }
    )


def test_claims_and_images_are_fetched_at_the_same_time() -> None:
    async def run() -> PolicyInput:
        meeting = _Meeting()
        gatherer = FactGatherer(inventory=_Inventory(), claims=meeting, images=meeting)
        policy_input, tenant, _ = await gatherer.gather(_pod())
        assert tenant == "vision"
        return policy_input

    policy_input = asyncio.run(run())
    assert policy_input["resource_claims"] == {"gpu-claim": {"found": True}}
    assert policy_input["images"] == {"registry.lab.example/vision/train:v1": _IMAGE}


def test_a_failure_to_read_the_claims_is_raised() -> None:
    async def run() -> None:
        images = _Meeting()
        images.claims_started.set()  # the images need not wait for claims that never come
        gatherer = FactGatherer(inventory=_Inventory(), claims=_FailingClaims(), images=images)
        await gatherer.gather(_pod())

    with pytest.raises(OSError, match="apiserver unreachable"):
        asyncio.run(run())


# Issue 22 item 7: a Tenant's update gets the tenant's own GPU usage (tenant-quota-below-usage).
class _Usage:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def usage_of(self, tenant: str, *, excluding: str | None = None) -> GpuAmount:
        if self.fail:
            raise ValueError(f"ledger of {tenant} does not parse")
        return GpuAmount(total=5, by_model={"h100": 5}) if tenant == "vision" else GpuAmount()


def _tenant_change(operation: str) -> AdmissionRequest:
    return parse_request(
        {
            "uid": "u",
            "kind": {"group": "labgate.io", "version": "v1alpha1", "kind": "Tenant"},
            "resource": {"group": "labgate.io", "version": "v1alpha1", "resource": "tenants"},
            "name": "vision",
            "operation": operation,
            "userInfo": {"username": "infra", "groups": ["system:masters"]},
            "object": {"metadata": {"name": "vision"}, "spec": {"gpu": {"models": {"h100": 2}}}},
        }
    )


@pytest.mark.parametrize(
    ("operation", "fail", "usage"),
    [
        ("UPDATE", False, {"total": 5, "by_model": {"h100": 5}}),
        ("CREATE", False, None),  # a new Tenant uses nothing yet
        ("UPDATE", True, None),  # an unreadable ledger stops no change, it only loses the warning
    ],
)
def test_a_tenant_update_gets_its_own_gpu_usage(operation: str, *, fail: bool, usage: Any) -> None:
    gatherer = FactGatherer(inventory=_Inventory(), tenant_facts=TenantFacts(gpu_usage=_Usage(fail)))
    policy_input, _, _ = asyncio.run(gatherer.gather(_tenant_change(operation)))
    assert policy_input.get("gpu_usage") == usage


class _Statuses:
    """What the Tenants' statuses say (webhook.tenant_status_facts.TenantStatusFacts), of "vision"
    only: each fact given, or None (its status does not say it)."""

    def __init__(
        self,
        *,
        held: HeldDocument | None = None,
        queued: QueuedDocument | None = None,
        pools: PoolCapacityDocument | None = None,
        open_nodes: OpenNodesDocument | None = None,
    ) -> None:
        self.held, self.queued, self.pools, self.nodes = held, queued, pools, open_nodes

    def held_by_unscheduled(self, tenant: str) -> HeldDocument | None:
        return self.held if tenant == "vision" else None

    def queued_in_kueue(self, tenant: str) -> QueuedDocument | None:
        return self.queued if tenant == "vision" else None

    def pool_gpus(self, tenant: str) -> PoolCapacityDocument | None:
        return self.pools if tenant == "vision" else None

    def open_nodes(self, tenant: str) -> OpenNodesDocument | None:
        return self.nodes if tenant == "vision" else None


# Issue 22 item 6: a GPU pod's refusal quotes what the tenant's pods not yet scheduled hold.
def test_a_gpu_pod_gets_what_pods_not_yet_scheduled_hold() -> None:
    holding = _Statuses(held={"gpus": 8, "pods": ["gpu-experiment-dzjhx"], "all_named": True})
    gatherer = FactGatherer(
        inventory=_Inventory(), tenant_facts=TenantFacts(gpu_usage=_Usage(), tenant_status=holding)
    )
    policy_input, _, _ = asyncio.run(gatherer.gather(_pod()))
    assert policy_input.get("gpu_held") == {"gpus": 8, "pods": ["gpu-experiment-dzjhx"], "all_named": True}
    # No status facts, or a status that does not say it: nothing added.
    for statuses in (None, _Statuses()):
        gatherer = FactGatherer(
            inventory=_Inventory(), tenant_facts=TenantFacts(gpu_usage=_Usage(), tenant_status=statuses)
        )
        plain, _, _ = asyncio.run(gatherer.gather(_pod()))
        assert "gpu_held" not in plain


def test_a_gpu_pod_gets_what_the_nodes_of_its_pools_hold() -> None:
    pools = _Statuses(pools={"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}})
    gatherer = FactGatherer(
        inventory=_Inventory(), tenant_facts=TenantFacts(gpu_usage=_Usage(), tenant_status=pools)
    )
    policy_input, _, _ = asyncio.run(gatherer.gather(_pod()))
    assert policy_input.get("gpu_pools") == {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}
    plain, _, _ = asyncio.run(
        FactGatherer(inventory=_Inventory(), tenant_facts=TenantFacts(gpu_usage=_Usage())).gather(_pod())
    )
    assert "gpu_pools" not in plain  # no facts: the Fix is as without nodes


# Issue 28 item 5: a pod that no node takes is told so at apply, from the Tenant's status.
_TAINTED: OpenNodesDocument = {
    "untainted": 0,
    "tainted": 3,
    "taint_keys": ["labgate.io/pool"],
    "more_taint_keys": 0,
}


def test_a_pod_created_gets_where_a_pod_without_tolerations_can_land() -> None:
    tainted = _Statuses(open_nodes=_TAINTED)
    policy_input, _, _ = asyncio.run(
        FactGatherer(inventory=_Inventory(), tenant_facts=TenantFacts(tenant_status=tainted)).gather(_pod())
    )
    assert policy_input.get("open_nodes") == _TAINTED
    plain, _, _ = asyncio.run(FactGatherer(inventory=_Inventory()).gather(_pod()))
    assert "open_nodes" not in plain  # no status yet: nothing said
    update = _pod().with_changes(operation="UPDATE")
    changed, _, _ = asyncio.run(
        FactGatherer(inventory=_Inventory(), tenant_facts=TenantFacts(tenant_status=tainted)).gather(update)
    )
    assert "open_nodes" not in changed  # a running pod's update is not where it is placed


@pytest.mark.parametrize(
    ("nodes", "fact"),
    [
        ({"untainted": 0, "tainted": 3, "taintKeys": ["labgate.io/pool"]},
         {"untainted": 0, "tainted": 3, "taint_keys": ["labgate.io/pool"], "more_taint_keys": 0}),
        ({"untainted": 0, "tainted": 20, "taintKeys": ["a"], "moreTaintKeys": 2},
         {"untainted": 0, "tainted": 20, "taint_keys": ["a"], "more_taint_keys": 2}),
        ({"untainted": 1, "tainted": 0}, {"untainted": 1, "tainted": 0, "taint_keys": [], "more_taint_keys": 0}),
        ({"untainted": "0", "tainted": 3}, None),
        ({"tainted": 3}, None),
        ({"untainted": 0, "tainted": 3, "taintKeys": "labgate.io/pool"}, None),
        (None, None),
    ],
    ids=["tainted", "more-keys", "untainted", "not-a-number", "partial", "keys-not-a-list", "no-status"],
)  # fmt: skip
def test_the_open_nodes_are_read_from_the_status(nodes: Any, fact: Any) -> None:
    from webhook.admission import open_nodes

    status = {} if nodes is None else {"nodes": nodes}
    assert open_nodes({"metadata": {"name": "vision", "generation": 2}, "status": status}) == fact


@pytest.mark.parametrize(
    ("status", "pools"),
    [
        ({"observedGeneration": 2, "gpu": {"pools": {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}}},
         {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}),
        ({"observedGeneration": 1, "gpu": {"pools": {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}}}, None),
        ({"observedGeneration": 2, "gpu": {"pools": {"h100": {"gpus": "16", "nodes": 2, "largestNode": 8}}}}, None),
        ({"observedGeneration": 2, "gpu": {}}, None),
        ({}, None),
    ],
    ids=["current", "stale", "not-a-number", "unknown", "no-status"],
)  # fmt: skip
def test_the_pools_are_read_from_a_current_status_only(status: dict[str, Any], pools: Any) -> None:
    from webhook.admission import pool_gpus

    assert pool_gpus({"metadata": {"name": "vision", "generation": 2}, "status": status}) == pools


@pytest.mark.parametrize(
    ("status", "held"),
    [
        (
            {"gpu": {"heldByUnscheduled": 8, "unscheduledPods": ["p"]}},
            {"gpus": 8, "pods": ["p"], "all_named": True},
        ),
        # The status names the first ten: those may be some of the pods that hold the GPUs.
        (
            {"gpu": {"heldByUnscheduled": 4676, "unscheduledPods": [f"p{i}" for i in range(10)]}},
            {"gpus": 4676, "pods": [f"p{i}" for i in range(10)], "all_named": False},
        ),
        ({"gpu": {"heldByUnscheduled": 0}}, None),
        ({"gpu": {"heldByUnscheduled": "8", "unscheduledPods": ["p"]}}, None),
        ({}, None),
    ],
)
def test_the_holds_are_read_from_the_tenants_status(status: dict[str, Any], held: Any) -> None:
    from webhook.admission import unscheduled_holds

    assert unscheduled_holds({"metadata": {"name": "vision"}, "status": status}) == held


# Issue 20: queue-wait quotes what Kueue holds queued of the tenant, as its status says it.
def test_a_gpu_request_gets_what_kueue_holds_queued() -> None:
    queueing = _Statuses(queued={"workloads": 1, "gpus": 32})
    gatherer = FactGatherer(
        inventory=_Inventory(), tenant_facts=TenantFacts(gpu_usage=_Usage(), tenant_status=queueing)
    )
    policy_input, _, _ = asyncio.run(gatherer.gather(_pod()))
    assert policy_input.get("gpu_queued") == {"workloads": 1, "gpus": 32}
    plain, _, _ = asyncio.run(
        FactGatherer(inventory=_Inventory(), tenant_facts=TenantFacts(gpu_usage=_Usage())).gather(_pod())
    )
    assert "gpu_queued" not in plain


@pytest.mark.parametrize(
    ("status", "queued"),
    [
        ({"gpu": {"queuedWorkloads": 2, "queuedGpus": 40}}, {"workloads": 2, "gpus": 40}),
        ({"gpu": {"queuedWorkloads": 0, "queuedGpus": 0}}, {"workloads": 0, "gpus": 0}),
        ({"gpu": {"used": 4}}, None),  # without Kueue the reconciler writes no queue columns
        ({}, None),
    ],
)
def test_what_kueue_holds_queued_is_read_from_the_tenants_status(status: dict[str, Any], queued: Any) -> None:
    from webhook.admission import queued_in_kueue

    assert queued_in_kueue({"metadata": {"name": "vision"}, "status": status}) == queued


class _Workloads:
    """The tenant's live pods' requests as the cached ledger holds them (no API call)."""

    def __init__(self, workloads: dict[str, int]) -> None:
        self.workloads = workloads
        self.asked: list[str] = []

    def workloads_of(self, tenant: str) -> dict[str, int]:
        self.asked.append(tenant)
        return self.workloads


def _cpu_pod(operation: str = "CREATE") -> AdmissionRequest:
    request: dict[str, Any] = copy.deepcopy(dict(_pod().document))
    request["operation"] = operation
    request["object"]["spec"] = {
        "containers": [{"name": "main", "image": "registry.lab.example/vision/train:v1"}]
    }
    return parse_request(request)


def test_a_pod_create_gets_its_tenants_live_usage_for_tenant_quota() -> None:
    usage = {"cpu": 6000, "memory": 1 << 30, "pods": 3}
    workloads = _Workloads(usage)
    gatherer = FactGatherer(inventory=_Inventory(), tenant_facts=TenantFacts(workload_usage=workloads))
    policy_input, _, _ = asyncio.run(gatherer.gather(_cpu_pod()))
    assert policy_input["tenant_usage"] == usage
    assert workloads.asked == ["vision"]


def test_no_usage_and_no_pod_create_mean_no_tenant_usage() -> None:
    none_yet = FactGatherer(inventory=_Inventory(), tenant_facts=TenantFacts(workload_usage=_Workloads({})))
    assert "tenant_usage" not in asyncio.run(none_yet.gather(_cpu_pod()))[0]
    workloads = _Workloads({"pods": 3})
    update = FactGatherer(inventory=_Inventory(), tenant_facts=TenantFacts(workload_usage=workloads))
    assert "tenant_usage" not in asyncio.run(update.gather(_cpu_pod("UPDATE")))[0]
    assert workloads.asked == []


def test_the_tenants_live_usage_is_read_from_its_cached_ledger() -> None:
    class Cached:
        def cached(self, tenant: str) -> Ledger:
            return Ledger(tenant=tenant, workloads={"cpu": 6000, "pods": 3} if tenant == "vision" else {})

    gatherer = FactGatherer(
        inventory=_Inventory(), tenant_facts=TenantFacts(workload_usage=TenantRequests(Cached()))
    )
    policy_input, _, _ = asyncio.run(gatherer.gather(_cpu_pod()))
    assert policy_input["tenant_usage"] == {"cpu": 6000, "pods": 3}
