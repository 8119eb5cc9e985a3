"""The reconciler's controllers on fakes of its doors: who hears of what, and that the GPU
settlement never holds up a tenant's RBAC."""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from labgate.core.api_resources import NAMESPACE, RESOURCE_QUOTA, ROLE_BINDING, TENANT, Kind, Object, kind_of
from labgate.core.kube import ApiException
from labgate.core.queue_config import QueueConfig
from labgate.core.tenant import FINALIZER, TENANT_LABEL
from labgate.gpu_accounting.ledger import GpuAmount, Ledger, LedgerConflictError, with_reservation
from labgate.gpu_accounting.ledger import now as ledger_now
from rbac.desired import object_key
from rbac.reconciler import Doors, Pacing, PolicyConfig, Reconciler
from rbac.runtime import WorkQueue
from tests.manual_clock import ManualClock

Key = tuple[str, str, str, str]


class FakeKube:
    """The calls the controllers make, answered as an API server would (apply merges and returns the
    whole object with a new resourceVersion; a delete whose precondition names an older one is
    refused with 409), each write counted. `before_delete` runs before each delete is answered: a
    write of someone else's landing between a controller's read and its delete."""

    api: Any = None

    def __init__(self) -> None:
        self.objects: dict[Key, Object] = {}
        self.applies: list[Key] = []
        self.deletions: list[Key] = []
        self.events: list[Object] = []
        self.finalized: list[str] = []
        self.applied = threading.Condition()
        self.versions = 0
        self.before_delete: Callable[[Key], None] = lambda _: None

    def lister(self, kind: Kind, **_: Any) -> Callable[..., Any]:
        return lambda **__: None

    def apply(self, obj: Object, *, subresource: str | None = None) -> Object:
        key = object_key(obj)
        stored = copy.deepcopy(self.objects.get(key) or {"metadata": {}})
        if subresource == "status":
            stored["status"] = copy.deepcopy(obj["status"])
        else:
            stored = {**stored, **copy.deepcopy(obj)}
        self.versions += 1
        stored["metadata"] = {**stored.get("metadata", {}), "resourceVersion": str(self.versions)}
        self.objects[key] = stored
        with self.applied:
            self.applies.append(key)
            self.applied.notify_all()
        return copy.deepcopy(stored)

    def create(self, kind: Kind, obj: Object, *, namespace: str | None = None) -> Object:
        with self.applied:
            self.events.append(obj)
            self.applied.notify_all()
        return obj

    def get(
        self, kind: Kind, name: str, *, namespace: str | None = None, timeout: float = 10
    ) -> Object | None:
        found = self.objects.get((kind.api_version, kind.kind, namespace or "", name))
        return copy.deepcopy(found) if found is not None else None

    def delete(
        self, kind: Kind, name: str, *, namespace: str | None = None, resource_version: str | None = None
    ) -> bool:
        key = (kind.api_version, kind.kind, namespace or "", name)
        self.before_delete(key)
        live = self.objects.get(key, {}).get("metadata", {})
        if resource_version and live.get("resourceVersion") not in (None, resource_version):
            raise ApiException(status=409, reason="Conflict")
        self.deletions.append(key)
        self.objects.pop(key, None)
        return True

    def write_as(self, key: Key, tenant: str) -> Object:
        """Someone else's write of `key`: labelled for `tenant`, a new resourceVersion."""
        self.versions += 1
        stored = copy.deepcopy(self.objects[key])
        stored["metadata"]["labels"] = {**stored["metadata"].get("labels", {}), TENANT_LABEL: tenant}
        stored["metadata"]["resourceVersion"] = str(self.versions)
        self.objects[key] = stored
        return copy.deepcopy(stored)

    def json_patch(self, kind: Kind, name: str, patch: list[dict[str, Any]], **_: Any) -> Object:
        assert [op["op"] for op in patch] == ["test", "remove"], "the tenant carries its finalizer already"
        self.finalized.append(name)
        return {}

    def wait_for_apply(self, key: Key, *, after: int, timeout: float) -> bool:
        with self.applied:
            return self.applied.wait_for(lambda: key in self.applies[after:], timeout=timeout)

    def wait_for_event(self, reason: str, *, timeout: float) -> bool:
        with self.applied:
            return self.applied.wait_for(
                lambda: reason in [e["reason"] for e in self.events], timeout=timeout
            )


class FakeLeader:
    is_leader = True

    def __init__(self) -> None:
        self.on_elected: Callable[[], None] = lambda: None

    def start(self) -> None: ...

    def stop(self) -> None: ...


class FakeLedgers:
    """Ledgers in memory; `conflicting` makes every write lose the compare-and-swap, and the re-read
    after it wait until `storm_over` (a conflict storm that outlasts the test)."""

    is_synced = True

    def __init__(self, *, conflicting: bool = False) -> None:
        self.ledgers: dict[str, Ledger] = {}
        self.conflicting = conflicting
        self.storm_over = threading.Event()
        self.in_conflict = threading.Event()
        self.writes = 0

    def cached(self, tenant: str) -> Ledger:
        return self.ledgers.get(tenant) or Ledger(tenant=tenant)

    def fresh(self, tenant: str) -> Ledger:
        if self.conflicting:
            self.in_conflict.set()
            self.storm_over.wait(timeout=30)
        return self.cached(tenant)

    def write(self, ledger: Ledger) -> Ledger:
        if self.conflicting:
            raise LedgerConflictError(ledger.tenant)
        self.writes += 1
        self.ledgers[ledger.tenant] = ledger
        return ledger

    def start(self) -> None: ...

    def stop(self) -> None: ...


class FakeSettled:
    is_synced = True

    def __init__(self) -> None:
        self.stored: dict[str, dict[str, Any]] = {}

    def ensure_at_least(self, tenant: str, versions: dict[str, str]) -> None: ...

    def pods(self, tenant: str) -> dict[str, Any]:
        return dict(self.stored.get(tenant, {}))

    def write(self, tenant: str, pods: dict[str, Any]) -> dict[str, str]:
        self.stored[tenant] = dict(pods)
        return {"0": str(len(self.stored))}

    def start(self) -> None: ...

    def stop(self) -> None: ...


TENANT_OBJECT: Object = {
    "apiVersion": "labgate.io/v1alpha1",
    "kind": "Tenant",
    "metadata": {"name": "vision", "generation": 1, "uid": "t-1", "finalizers": [FINALIZER]},
    "spec": {
        "members": {"researchers": [{"kind": "Group", "name": "vision"}]},
        "namespaces": {"names": ["vision"]},
        "gpu": {"total": 8},
    },
}
NAMESPACE_OBJECT: Object = {
    "apiVersion": "v1",
    "kind": "Namespace",
    "metadata": {"name": "vision", "labels": {TENANT_LABEL: "vision"}},
    "status": {"phase": "Active"},
}


def a_pod(i: int, *, gpus: int = 0, phase: str = "Running") -> Object:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return {
        "metadata": {"name": f"p{i}", "namespace": "vision", "uid": f"uid-{i}"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": limits}}]},
        "status": {"phase": phase},
    }


def make(
    ledgers: FakeLedgers | None = None,
    *,
    intervals: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
    queue_config: QueueConfig | None = None,
) -> tuple[Reconciler, FakeKube]:
    kube = FakeKube()
    for obj in (TENANT_OBJECT, NAMESPACE_OBJECT):
        kube.objects[object_key(obj)] = copy.deepcopy(obj)
    doors = Doors(
        kube=kube,  # type: ignore[arg-type]  # fakes of the calls the controllers make
        leader=FakeLeader(),  # type: ignore[arg-type]
        ledgers=ledgers or FakeLedgers(),  # type: ignore[arg-type]
        settled=FakeSettled(),  # type: ignore[arg-type]
    )
    reconciler = Reconciler(
        None,
        namespace="labgate-system",
        identity="test",
        doors=doors,
        policy=PolicyConfig(queue_config=queue_config or QueueConfig()),
        pacing=Pacing(settle_seconds=intervals, status_seconds=2 * intervals, clock=clock),
    )
    for reflector in reconciler.reflectors:
        reflector.has_synced.set()
    reconciler.observe(NAMESPACE, "ADDED", NAMESPACE_OBJECT)
    reconciler.observe(TENANT, "ADDED", TENANT_OBJECT)
    return reconciler, kube


def drain(reconciler: Reconciler) -> None:
    """Run every queue's work on this thread until all are empty."""
    queues: list[tuple[WorkQueue, Callable[[str], None]]] = [
        (reconciler.tenants.queue, reconciler.tenants.handle),
        (reconciler.settlement.queue, reconciler.settlement.handle),
        (reconciler.status.queue, reconciler.status.handle),
    ]
    while any(len(queue) for queue, _ in queues):
        for queue, handle in queues:
            if (name := queue.get(timeout=0)) is not None:
                try:
                    handle(name)
                finally:
                    queue.done(name)


def test_a_new_tenant_is_provisioned_then_its_status_written() -> None:
    reconciler, kube = make()
    drain(reconciler)
    assert reconciler.reconciled == 1
    binding = ("rbac.authorization.k8s.io/v1", "RoleBinding", "vision", "labgate-researchers")
    assert binding in kube.applies
    status = kube.objects[("labgate.io/v1alpha1", "Tenant", "", "vision")]["status"]
    assert (status["observedGeneration"], status["gpu"]["used"], status["conditions"][0]["status"]) == (
        1,
        0,
        "True",
    )


@pytest.mark.parametrize("gpus", [0, 1], ids=["cpu-pods", "gpu-pods"])
def test_a_burst_of_pod_events_reconciles_no_tenant_rbac_and_applies_nothing(gpus: int) -> None:
    """100 pods come and go: only the settlement (and the status it feeds) hears of them; the
    tenant's RBAC is not reconciled, and no object is applied (beyond the status, for GPU pods)."""
    reconciler, kube = make()
    drain(reconciler)
    reconciled, applied, settlements = (
        reconciler.reconciled,
        len(kube.applies),
        reconciler.settlement.settlements,
    )
    for i in range(100):
        reconciler.settlement.pods.on_event("ADDED", a_pod(i, gpus=gpus))
        assert len(reconciler.tenants.queue) == 0
    drain(reconciler)
    for i in range(100):
        reconciler.settlement.pods.on_event("DELETED", a_pod(i, gpus=gpus))
    drain(reconciler)
    assert reconciler.reconciled == reconciled  # no RBAC reconcile at all
    assert reconciler.settlement.settlements > settlements
    applies = [key[1] for key in kube.applies[applied:]]
    assert applies == ([] if not gpus else ["Tenant"] * len(applies))
    # Our own status writes come back as Tenant events that change only the status: no RBAC either.
    for key in kube.applies[applied:]:
        reconciler.observe(TENANT, "MODIFIED", kube.objects[key])
    drain(reconciler)
    assert reconciler.reconciled == reconciled
    if gpus:
        used = kube.objects[("labgate.io/v1alpha1", "Tenant", "", "vision")]["status"]["gpu"]["used"]
        assert used == 0  # counted while they ran, released once they went


def test_a_burst_of_gpu_pods_costs_a_few_ledger_and_status_writes_and_ends_exact() -> None:
    """100 GPU pods bind over 5 s (issue 21): settled at most once a second and the status written at
    most once per 2 s, not once per pod; once the burst is over, the ledger and status are exact."""
    clock = ManualClock()
    ledgers = FakeLedgers()
    reconciler, kube = make(ledgers, intervals=1.0, clock=clock)
    drain(reconciler)
    tenant = ("labgate.io/v1alpha1", "Tenant", "", "vision")
    writes, statuses = ledgers.writes, kube.applies.count(tenant)
    for i in range(100):
        clock.now = 10.0 + i * 0.05
        reconciler.settlement.pods.on_event("ADDED", a_pod(i, gpus=1))
        drain_ready(reconciler)
    assert ledgers.writes - writes <= 6  # one a second at most (before: one per pod)
    assert kube.applies.count(tenant) - statuses <= 3
    clock.now += 2.0
    drain_ready(reconciler)
    assert len(reconciler.settlement.queue) == len(reconciler.status.queue) == 0
    assert ledgers.ledgers["vision"].settled.total == 100  # every pod counted: the last state written
    assert kube.objects[tenant]["status"]["gpu"]["used"] == 100


def drain_ready(reconciler: Reconciler) -> None:
    """Run the work each queue hands out now (names within their interval wait)."""
    queues = [
        (reconciler.tenants.queue, reconciler.tenants.handle),
        (reconciler.settlement.queue, reconciler.settlement.handle),
        (reconciler.status.queue, reconciler.status.handle),
    ]
    handed = True
    while handed:
        handed = False
        for queue, handle in queues:
            if (name := queue.get(timeout=0)) is not None:
                handed = True
                try:
                    handle(name)
                finally:
                    queue.done(name)


def reserved(ledgers: FakeLedgers, i: int, gpus: int) -> None:
    """The webhook admitted pod `p<i>` (its uid `uid-<i>`) and reserved its GPUs."""
    ledger = ledgers.cached("vision")
    ledgers.ledgers["vision"] = with_reservation(
        ledger, f"uid-{i}", GpuAmount(total=gpus), now=ledger_now(), pod=f"vision/p{i}"
    )


# Issue 28 item 4: a pod created and deleted within the settlement's pace was counted as its
# reservation until the next pass, and refused the researcher's next pod.
def test_a_pod_deleted_before_it_was_settled_is_released_at_once_and_a_settled_one_at_the_pace() -> None:
    clock = ManualClock()
    ledgers = FakeLedgers()
    reconciler, _ = make(ledgers, intervals=1.0, clock=clock)
    drain(reconciler)
    settlement = reconciler.settlement
    clock.now = 10.0
    reserved(ledgers, 7, gpus=2)
    settlement.ledger_holds_reservations("vision")  # the reservation's ledger write wakes it
    drain_ready(reconciler)  # before the pod is seen: the reservation stays, the pod is on its way
    clock.now = 10.2
    settlement.pods.on_event("ADDED", a_pod(7, gpus=2))
    drain_ready(reconciler)
    assert "uid-7" in ledgers.ledgers["vision"].reservations  # a pod that came waits for the pace
    clock.now = 10.4
    settlement.pods.on_event("DELETED", a_pod(7, gpus=2))
    drain_ready(reconciler)
    assert ledgers.ledgers["vision"].reservations == {}  # released within the pace: at once
    assert ledgers.ledgers["vision"].settled.total == 0
    # A settled pod's deletion waits for the pace (a burst of deletions stays a few writes).
    clock.now = 20.0
    reserved(ledgers, 8, gpus=2)
    settlement.pods.on_event("ADDED", a_pod(8, gpus=2))
    drain_ready(reconciler)
    assert ledgers.ledgers["vision"].settled.total == 2
    clock.now = 20.3
    settlement.pods.on_event("DELETED", a_pod(8, gpus=2))
    drain_ready(reconciler)
    assert ledgers.ledgers["vision"].settled.total == 2
    clock.now = 21.0
    drain_ready(reconciler)
    assert ledgers.ledgers["vision"].settled.total == 0


def test_a_reservation_seen_after_its_pod_was_deleted_is_released_at_once() -> None:
    """The pod watch ran ahead of the ledger's: the deletion came before the reservation was seen."""
    clock = ManualClock()
    ledgers = FakeLedgers()
    reconciler, _ = make(ledgers, intervals=1.0, clock=clock)
    drain(reconciler)
    settlement = reconciler.settlement
    clock.now = 10.0
    settlement.pods.on_event("ADDED", a_pod(9, gpus=2))
    settlement.pods.on_event("DELETED", a_pod(9, gpus=2))
    drain_ready(reconciler)
    clock.now = 10.3
    reserved(ledgers, 9, gpus=2)
    reserved(ledgers, 10, gpus=1)  # a pod on its way, beside it
    settlement.ledger_holds_reservations("vision")
    drain_ready(reconciler)
    assert list(ledgers.ledgers["vision"].reservations) == ["uid-10"]


def test_gpu_pods_that_nobody_counted_are_settled_and_shown_in_the_status() -> None:
    reconciler, kube = make()
    drain(reconciler)
    for i in range(3):
        reconciler.settlement.pods.on_event("ADDED", a_pod(i, gpus=2))
    drain(reconciler)
    status = kube.objects[("labgate.io/v1alpha1", "Tenant", "", "vision")]["status"]
    assert status["gpu"]["used"] == 6
    assert [e["reason"] for e in kube.events] == ["GpuUsageRecounted"]


# Issue 22 item 6: the status says which admitted GPU pods hold quota while they wait for a node.
def test_gpu_pods_not_yet_scheduled_are_shown_apart_in_the_status() -> None:
    reconciler, kube = make()
    drain(reconciler)
    waiting = a_pod(1, gpus=8, phase="Pending")
    bound = {**a_pod(2, gpus=8, phase="Pending"), "spec": {**a_pod(2, gpus=8)["spec"], "nodeName": "n1"}}
    for pod in (waiting, bound, a_pod(3, gpus=2)):
        reconciler.settlement.pods.on_event("ADDED", pod)
    drain(reconciler)
    gpu = kube.objects[("labgate.io/v1alpha1", "Tenant", "", "vision")]["status"]["gpu"]
    assert (gpu["heldByUnscheduled"], gpu["unscheduledPods"]) == (8, ["p1"])
    assert gpu["summary"].endswith("; 8 held by 1 pod not yet scheduled: p1")


# Issue 20: a GPU pod behind Kueue's admission gate holds nothing: not counted, not listed as held.
def test_a_gpu_pod_behind_kueues_gate_is_neither_counted_nor_held() -> None:
    reconciler, kube = make()
    drain(reconciler)
    gated = a_pod(1, gpus=8, phase="Pending")
    gated["spec"] = {**gated["spec"], "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}]}
    reconciler.settlement.pods.on_event("ADDED", gated)
    reconciler.settlement.pods.on_event("ADDED", a_pod(2, gpus=2))
    drain(reconciler)
    gpu = kube.objects[("labgate.io/v1alpha1", "Tenant", "", "vision")]["status"]["gpu"]
    assert (gpu["used"], gpu["heldByUnscheduled"]) == (2, 0)
    assert "unscheduledPods" not in gpu
    assert [e["message"] for e in kube.events if "p1" in e["message"]] == []  # not recounted either


def test_a_tenant_spec_change_reconciles_rbac_but_a_status_change_does_not() -> None:
    reconciler, _ = make()
    drain(reconciler)
    live = reconciler.cache.get(("labgate.io/v1alpha1", "Tenant", "", "vision"))
    assert live is not None
    reconciler.observe(TENANT, "MODIFIED", {**live, "status": {**live["status"], "gpu": {"used": 3}}})
    assert len(reconciler.tenants.queue) == 0
    assert len(reconciler.status.queue) == 1
    changed = copy.deepcopy(live)
    changed["metadata"]["generation"] = 2
    changed["spec"]["members"]["researchers"].append({"kind": "User", "name": "bo"})
    reconciler.observe(TENANT, "MODIFIED", changed)
    assert len(reconciler.tenants.queue) == 1


def test_a_namespace_the_tenant_no_longer_names_keeps_its_isolation_while_it_carries_the_label() -> None:
    """Taken out of spec.namespaces.names, the namespace keeps the tenant label (only the platform
    takes it off) and so stays the tenant's for the webhook, its pods in the tenant's count: its
    baseline NetworkPolicies, quotas and bindings stay until the label goes."""
    reconciler, kube = make()
    drain(reconciler)
    moved = copy.deepcopy(TENANT_OBJECT)
    moved["metadata"]["generation"] = 2
    moved["spec"]["namespaces"] = {"names": ["vision-new"]}
    reconciler.observe(TENANT, "MODIFIED", moved)
    drain(reconciler)
    assert [key for key in kube.deletions if key[2] == "vision"] == []
    kept = {key[1:] for key in kube.objects if key[2] == "vision"}
    assert {
        ("NetworkPolicy", "vision", "labgate-baseline-ingress"),
        ("NetworkPolicy", "vision", "labgate-baseline-egress"),
    } <= kept
    assert ("NetworkPolicy", "vision-new", "labgate-baseline-ingress") in {key[1:] for key in kube.objects}


RESTRICTIONS = {
    ("NetworkPolicy", "labgate-baseline-ingress"),
    ("NetworkPolicy", "labgate-baseline-egress"),
    ("ResourceQuota", "labgate-gpu"),
    ("LimitRange", "labgate-defaults"),
}
GRANTS = {
    ("RoleBinding", "labgate-admins"),
    ("RoleBinding", "labgate-researchers"),
    ("RoleBinding", "labgate-viewers"),
    ("ServiceAccount", "experiment"),
}


def in_namespace(kube: FakeKube, namespace: str) -> set[tuple[str, str]]:
    return {(key[1], key[3]) for key in kube.objects if key[2] == namespace}


def deleting(keep_on_delete: bool | None = None) -> Object:
    tenant = copy.deepcopy(TENANT_OBJECT)
    tenant["metadata"]["deletionTimestamp"] = "2026-12-06T10:00:00Z"
    if keep_on_delete is not None:
        tenant["spec"]["namespaces"]["keepOnDelete"] = keep_on_delete
    return tenant


def test_a_deleted_tenants_kept_namespace_keeps_its_restrictions_and_loses_its_grants() -> None:
    """keepOnDelete (the default): the pods there go on running, so the baseline NetworkPolicies
    and quotas stay (other tenants still cannot reach them, nor they the metadata address); the
    members' bindings and the service account go. Gone for good, the Tenant's leftovers stay too."""
    reconciler, kube = make()
    drain(reconciler)
    assert in_namespace(kube, "vision") >= RESTRICTIONS | GRANTS
    reconciler.observe(TENANT, "MODIFIED", deleting())
    drain(reconciler)
    assert kube.finalized == ["vision"]
    left = in_namespace(kube, "vision")
    assert left >= RESTRICTIONS
    assert left & GRANTS == set()
    assert ("v1", "Namespace", "", "vision") not in kube.deletions
    cluster_wide = {key[3] for key in kube.objects if key[2] == "" and "ClusterRole" in key[1]}
    assert not {name for name in cluster_wide if name.startswith("labgate:tenant:vision")}
    # The Tenant object goes; its cleanup pass (after the event, and at each resync) keeps them.
    reconciler.observe(TENANT, "DELETED", deleting())
    reconciler.enqueue_all()
    assert len(reconciler.tenants.queue) == 1, "a gone tenant that labels objects still is queued"
    drain(reconciler)
    assert in_namespace(kube, "vision") >= RESTRICTIONS


def test_a_deleted_tenant_without_keep_on_delete_leaves_nothing() -> None:
    reconciler, kube = make()
    drain(reconciler)
    reconciler.observe(TENANT, "MODIFIED", deleting(keep_on_delete=False))
    drain(reconciler)
    assert in_namespace(kube, "vision") == set()
    assert ("v1", "Namespace", "", "vision") in kube.deletions


def released(namespace: Object) -> Object:
    copied = copy.deepcopy(namespace)
    del copied["metadata"]["labels"][TENANT_LABEL]
    return copied


def test_a_kept_namespace_the_platform_releases_loses_the_deleted_tenants_restrictions() -> None:
    reconciler, kube = make()
    drain(reconciler)
    reconciler.observe(TENANT, "MODIFIED", deleting())
    drain(reconciler)
    reconciler.observe(TENANT, "DELETED", deleting())
    drain(reconciler)
    reconciler.observe(NAMESPACE, "MODIFIED", released(NAMESPACE_OBJECT))
    assert len(reconciler.tenants.queue) == 1, "the tenant the namespace left hears of it"
    drain(reconciler)
    assert in_namespace(kube, "vision") == set()


def test_a_namespace_released_from_a_live_tenant_loses_its_bindings_at_once() -> None:
    """The platform takes the label off a namespace the Tenant no longer names: the webhook no
    longer judges it, so the members' bindings there go now, not at the next resync."""
    reconciler, kube = make()
    drain(reconciler)
    moved = copy.deepcopy(TENANT_OBJECT)
    moved["metadata"]["generation"] = 2
    moved["spec"]["namespaces"] = {"names": ["vision-new"]}
    kube.objects[object_key(moved)] = copy.deepcopy(moved)  # what the status writes read back
    reconciler.observe(TENANT, "MODIFIED", moved)
    drain(reconciler)
    assert in_namespace(kube, "vision") >= GRANTS
    reconciler.observe(NAMESPACE, "MODIFIED", released(NAMESPACE_OBJECT))
    assert len(reconciler.tenants.queue) == 1
    drain(reconciler)
    assert in_namespace(kube, "vision") == set()
    assert in_namespace(kube, "vision-new") >= GRANTS


@pytest.fixture
def conflict_storm() -> Iterator[FakeLedgers]:
    ledgers = FakeLedgers(conflicting=True)
    yield ledgers
    ledgers.storm_over.set()


def test_a_drifted_role_binding_is_repaired_while_settlement_is_stuck_in_ledger_conflicts(
    conflict_storm: FakeLedgers, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="rbac.tenant_controller")
    reconciler, kube = make(conflict_storm)
    binding_key = ("rbac.authorization.k8s.io/v1", "RoleBinding", "vision", "labgate-researchers")
    reconciler.start_workers()
    try:
        assert kube.wait_for_apply(("labgate.io/v1alpha1", "Tenant", "", "vision"), after=0, timeout=10)
        # A GPU pod nobody counted: its settlement loses the ledger's compare-and-swap, over and over.
        reconciler.settlement.pods.on_event("ADDED", a_pod(1, gpus=2))
        assert conflict_storm.in_conflict.wait(timeout=10)
        # Someone deletes a managed RoleBinding: its watch event queues the tenant's provisioning.
        before = len(kube.applies)
        binding = kube.objects[binding_key]
        reconciler.observe(ROLE_BINDING, "DELETED", binding)
        assert kube.wait_for_apply(binding_key, after=before, timeout=5), "drift repaired despite the storm"
        assert kube.wait_for_event("DriftRepaired", timeout=5)
        # The operator sees the repair in the reconciler's log too (issue 22 item 14).
        assert "tenant vision: drift repaired: restored RoleBinding vision/labgate-researchers" in caplog.text
        assert not conflict_storm.storm_over.is_set()  # the settlement is still stuck
        assert kind_of(binding) is ROLE_BINDING
    finally:
        conflict_storm.storm_over.set()
        reconciler.stop_workers()


def test_cpu_pods_coming_and_going_keep_the_ledgers_workloads_current() -> None:
    """tenant-quota's usage: the settlement writes what the tenant's live pods ask into the ledger
    (which the webhook reads from its cache); finished and deleted pods leave it. A tenant without
    limits gets no such writes (its ledger is written as often as before)."""
    reconciler, kube = make()
    drain(reconciler)
    reconciler.settlement.pods.on_event("ADDED", a_pod(9))
    drain(reconciler)
    assert reconciler.ledgers.cached("vision").workloads == {}  # no limits, no workloads
    reconciler.settlement.pods.on_event("DELETED", a_pod(9))
    limited = kube.objects[("labgate.io/v1alpha1", "Tenant", "", "vision")]
    limited["metadata"]["generation"] = 2
    limited["spec"]["limits"] = {"cpu": "8"}
    reconciler.observe(TENANT, "MODIFIED", copy.deepcopy(limited))
    drain(reconciler)
    for i in range(3):
        pod = a_pod(i)
        pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}}
        reconciler.settlement.pods.on_event("ADDED", pod)
    drain(reconciler)
    ledgers = reconciler.ledgers
    assert ledgers.cached("vision").workloads == {"cpu": 1500, "memory": 3 << 30, "pods": 3}
    reconciler.settlement.pods.on_event("MODIFIED", a_pod(0, phase="Succeeded"))
    reconciler.settlement.pods.on_event("DELETED", a_pod(1))
    drain(reconciler)
    assert ledgers.cached("vision").workloads == {"cpu": 500, "memory": 1 << 30, "pods": 1}


# Issue 22 item 6: a quota the nodes of the tenant's pools can never hold was said nowhere.
def _gpu_node(name: str, gpus: int, pool: str = "h100-spot") -> Object:
    return {
        "metadata": {"name": name, "labels": {"labgate.io/pool": pool, "nvidia.com/gpu.product": "h100"}},
        "status": {"allocatable": {"nvidia.com/gpu": str(gpus)}, "conditions": [{"type": "Ready"}]},
    }


def test_what_the_pools_nodes_hold_is_in_the_status_with_a_condition() -> None:
    reconciler, kube = make()
    key = ("labgate.io/v1alpha1", "Tenant", "", "vision")
    pools = {"nodePools": [{"name": "h100-spot", "nodeSelector": {"labgate.io/pool": "h100-spot"}}]}
    spec = {**TENANT_OBJECT["spec"], "gpu": {"total": 24, "models": {"h100": 24}}, "placement": pools}
    kube.objects[key]["spec"] = spec  # as the infra team applied it
    reconciler.observe(TENANT, "MODIFIED", copy.deepcopy(kube.objects[key]))
    drain(reconciler)
    assert [c["type"] for c in kube.objects[key]["status"]["conditions"]] == ["Ready"]  # nodes not listed yet
    reconciler.status.nodes.on_list(
        [_gpu_node("spot-0", 8), _gpu_node("spot-1", 8), _gpu_node("theirs", 8, "speech")]
    )
    drain(reconciler)
    status = kube.objects[key]["status"]
    assert status["gpu"]["pools"] == {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}
    quota = status["conditions"][1]
    assert (quota["type"], quota["status"], quota["reason"]) == (
        "QuotaFitsPools",
        "False",
        "QuotaBeyondPools",
    )
    assert quota["message"] == "h100: quota 24, its pools' nodes hold 16 (2 nodes, the largest 8)"
    # A kubelet's heartbeat changes nothing of a node's GPUs: nothing is written.
    applied = len(kube.applies)
    reconciler.status.nodes.on_event(
        "MODIFIED", {**_gpu_node("spot-0", 8), "status": {"allocatable": {"nvidia.com/gpu": 8}}}
    )
    reconciler.observe(TENANT, "MODIFIED", kube.objects[key])
    drain(reconciler)
    assert len(kube.applies) == applied
    # A third node: the pools hold the quota.
    reconciler.status.nodes.on_event("ADDED", _gpu_node("spot-2", 8))
    drain(reconciler)
    status = kube.objects[key]["status"]
    assert status["gpu"]["pools"]["h100"] == {"gpus": 24, "nodes": 3, "largestNode": 8}
    assert status["conditions"][1]["status"] == "True"


def test_a_tenant_without_pools_gets_no_quota_condition() -> None:
    reconciler, kube = make()
    reconciler.status.nodes.on_list([_gpu_node("spot-0", 8)])
    drain(reconciler)
    status = kube.objects[("labgate.io/v1alpha1", "Tenant", "", "vision")]["status"]
    assert [c["type"] for c in status["conditions"]] == ["Ready"]
    assert "pools" not in status["gpu"]


# Issue 28 item 5: where a pod without tolerations can land was said nowhere; every tenant's status says it.
def test_where_a_pod_without_tolerations_can_land_is_in_the_status() -> None:
    reconciler, kube = make()
    key = ("labgate.io/v1alpha1", "Tenant", "", "vision")
    drain(reconciler)
    assert "nodes" not in kube.objects[key]["status"]  # nodes not listed yet: nothing said
    tainted = _gpu_node("spot-0", 8)
    tainted["spec"] = {"taints": [{"key": "labgate.io/pool", "value": "vision", "effect": "NoSchedule"}]}
    tainted["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    reconciler.status.nodes.on_list([tainted])
    drain(reconciler)
    status = kube.objects[key]["status"]
    assert status["nodes"] == {"untainted": 0, "tainted": 1, "taintKeys": ["labgate.io/pool"]}
    cpu = {"metadata": {"name": "cpu-0"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    reconciler.status.nodes.on_event("ADDED", cpu)
    drain(reconciler)
    assert kube.objects[key]["status"]["nodes"] == {
        "untainted": 1,
        "tainted": 1,
        "taintKeys": ["labgate.io/pool"],
    }


GPU_BACKSTOP: Key = ("v1", "ResourceQuota", "vision", "labgate-gpu")


@pytest.mark.parametrize("pod_integration", [False, True], ids=["jobs-only", "pod-integration"])
def test_where_kueue_gates_gpu_pods_the_gpu_backstop_is_removed_and_not_restored(
    pod_integration: bool,
) -> None:
    """A Kueue-managed tenant whose namespace has labgate-gpu (made before the pod integration was
    turned on): with the pod integration the reconciler deletes it, and a resync after its deletion
    does not bring it back; with Kueue queueing Jobs only, it stays, and is restored when deleted."""
    config = QueueConfig(managed_by_kueue=True, pod_integration=pod_integration)
    reconciler, kube = make(queue_config=config)
    live = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "labgate-gpu",
            "namespace": "vision",
            "labels": {"app.kubernetes.io/managed-by": "labgate", TENANT_LABEL: "vision"},
        },
        "spec": {"hard": {"requests.nvidia.com/gpu": "8"}},
    }
    reconciler.observe(RESOURCE_QUOTA, "ADDED", live)
    drain(reconciler)
    assert (GPU_BACKSTOP in kube.deletions) is pod_integration
    # It is gone (deleted by the reconciler, or by someone: drift): a resync restores it only where
    # Kueue does not gate the tenant's GPU pods.
    reconciler.observe(RESOURCE_QUOTA, "DELETED", live)
    before = len(kube.applies)
    reconciler.enqueue_all()
    drain(reconciler)
    assert (GPU_BACKSTOP in kube.applies[before:]) is not pod_integration


def provisioned_then_dropped_from_the_spec() -> tuple[Reconciler, FakeKube]:
    """Tenant vision provisioned, then its spec lists vision-new instead of vision (which keeps the
    tenant's label, so stays vision's)."""
    reconciler, kube = make()
    drain(reconciler)
    dropped = copy.deepcopy(TENANT_OBJECT)
    dropped["metadata"]["generation"] = 2
    dropped["spec"]["namespaces"] = {"names": ["vision-new"]}
    kube.objects[object_key(dropped)] = copy.deepcopy(dropped)
    reconciler.observe(TENANT, "MODIFIED", dropped)
    drain(reconciler)
    return reconciler, kube


def test_a_namespace_moved_to_another_tenant_keeps_what_that_tenant_applied_there_meanwhile() -> None:
    """The platform moves namespace vision to tenant nlp. vision's pass removes its objects there
    while nlp's pass applies its own of the same names: a delete of vision's landing after nlp's
    apply would leave nlp's namespace without its baseline NetworkPolicies. Each delete names the
    version vision read, so nlp's stays."""
    reconciler, kube = provisioned_then_dropped_from_the_spec()
    assert in_namespace(kube, "vision") >= RESTRICTIONS | GRANTS
    rewritten: list[Key] = []

    def nlp_applies_first(key: Key) -> None:
        if key[2] == "vision" and key not in rewritten:
            rewritten.append(key)
            kube.write_as(key, "nlp")

    kube.before_delete = nlp_applies_first
    moved = copy.deepcopy(NAMESPACE_OBJECT)
    moved["metadata"]["labels"][TENANT_LABEL] = "nlp"
    reconciler.observe(NAMESPACE, "MODIFIED", moved)
    drain(reconciler)
    assert rewritten, "vision's pass tried to remove its objects from the namespace it lost"
    assert [key for key in kube.deletions if key[2] == "vision"] == []
    assert in_namespace(kube, "vision") >= RESTRICTIONS | GRANTS
    assert {labels_of(kube.objects[key]) for key in rewritten} == {"nlp"}


def labels_of(obj: Object) -> str:
    return str(obj["metadata"]["labels"][TENANT_LABEL])


def test_the_pair_a_namespace_moved_without_a_concurrent_write_loses_the_old_tenants_objects() -> None:
    reconciler, kube = provisioned_then_dropped_from_the_spec()
    moved = copy.deepcopy(NAMESPACE_OBJECT)
    moved["metadata"]["labels"][TENANT_LABEL] = "nlp"
    reconciler.observe(NAMESPACE, "MODIFIED", moved)
    drain(reconciler)
    assert in_namespace(kube, "vision") == set()


def deleted_while_written(target: Key, tenant: str) -> tuple[Reconciler, FakeKube, list[Object]]:
    """Tenant vision provisioned, then deleted with keepOnDelete false; someone else's write of
    `target`, labelled for `tenant`, lands just before its first delete (the list: as written)."""
    reconciler, kube = make()
    drain(reconciler)
    written: list[Object] = []

    def write_first(key: Key) -> None:
        if key == target and not written:
            written.append(kube.write_as(key, tenant))

    kube.before_delete = write_first
    reconciler.observe(TENANT, "MODIFIED", deleting(keep_on_delete=False))
    drain(reconciler)
    assert written, "the clean-up tried to delete it"
    return reconciler, kube, written


def test_a_deleted_tenants_namespace_moved_during_its_cleanup_stays_with_its_new_tenant() -> None:
    """keepOnDelete false: a cluster admin moves the namespace to tenant nlp between the read and the
    delete. The namespace is nlp's now, so it stays; the Tenant keeps its finalizer until the move's
    event brings a pass that finds nothing of its left, then goes."""
    namespace_key = ("v1", "Namespace", "", "vision")
    reconciler, kube, moved = deleted_while_written(namespace_key, "nlp")
    assert namespace_key not in kube.deletions
    assert kube.finalized == []
    reconciler.observe(NAMESPACE, "MODIFIED", moved[0])
    drain(reconciler)
    assert kube.finalized == ["vision"]
    assert labels_of(kube.objects[namespace_key]) == "nlp"


def test_the_pair_an_object_written_during_cleanup_but_still_the_tenants_goes_in_the_same_pass() -> None:
    """The quota controller writes a ResourceQuota's status while pods come and go: a delete that
    meets a newer version of an object still labelled for the tenant deletes that version."""
    quota = ("v1", "ResourceQuota", "vision", "labgate-gpu")
    _, kube, _ = deleted_while_written(quota, "vision")
    assert quota in kube.deletions
    assert ("v1", "Namespace", "", "vision") in kube.deletions
    assert kube.finalized == ["vision"]


def nlp_tenant(names: list[str]) -> Object:
    tenant = copy.deepcopy(TENANT_OBJECT)
    tenant["metadata"].update({"name": "nlp", "uid": "t-2"})
    tenant["spec"]["members"] = {"researchers": [{"kind": "Group", "name": "nlp"}]}
    tenant["spec"]["namespaces"] = {"names": names}
    return tenant


def test_two_tenants_naming_one_namespace_do_not_take_it_from_each_other() -> None:
    """Two Tenant writes admitted at once (the webhook's inventory a moment behind) may both name
    namespace shared. The first pass labels it; the other tenant does not relabel it, gives its
    members nothing there, and says why on its Tenant."""
    reconciler, kube = make()
    drain(reconciler)
    both = copy.deepcopy(TENANT_OBJECT)
    both["metadata"]["generation"] = 2
    both["spec"]["namespaces"] = {"names": ["vision", "shared"]}
    for tenant in (both, nlp_tenant(["shared"])):
        kube.objects[object_key(tenant)] = copy.deepcopy(tenant)
        reconciler.observe(TENANT, "MODIFIED", tenant)
    drain(reconciler)
    shared = ("v1", "Namespace", "", "shared")
    assert kube.applies.count(shared) == 1
    owner = labels_of(kube.objects[shared])
    other = {"vision", "nlp"} - {owner}
    bindings = [o for k, o in kube.objects.items() if k[1] == "RoleBinding" and k[2] == "shared"]
    assert bindings
    assert {labels_of(b) for b in bindings} == {owner}
    warnings = [e for e in kube.events if e["reason"] == "NamespaceHeldByAnotherTenant"]
    assert [e["involvedObject"]["name"] for e in warnings] == list(other)
    assert f"shared (labelled for tenant {owner})" in warnings[0]["message"]
    # The namespace's event (its label) brings no fight: the other tenant's pass leaves it.
    reconciler.observe(NAMESPACE, "ADDED", kube.objects[shared])
    drain(reconciler)
    assert kube.applies.count(shared) == 1
    assert len([e for e in kube.events if e["reason"] == "NamespaceHeldByAnotherTenant"]) == 1, "said once"
    (loser,) = other
    assert ready_of(kube, loser) == ("False", "NamespaceHeldByAnotherTenant")
    assert ready_of(kube, owner)[1] == "NamespacesPending", "the holder waits only for the fake's phases"


def ready_of(kube: FakeKube, tenant: str) -> tuple[str, str]:
    """The Ready condition's status and reason the reconciler last wrote for `tenant`."""
    conditions = kube.objects[("labgate.io/v1alpha1", "Tenant", "", tenant)]["status"]["conditions"]
    ready = next(c for c in conditions if c["type"] == "Ready")
    return ready["status"], ready["reason"]


def test_the_pair_a_namespace_labelled_for_a_tenant_that_is_gone_is_taken() -> None:
    """A deleted tenant's kept namespace, listed by another Tenant, becomes that tenant's."""
    reconciler, kube = make()
    drain(reconciler)
    kept = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "old-data", "labels": {TENANT_LABEL: "ghost"}},
    }
    kube.objects[object_key(kept)] = copy.deepcopy(kept)
    reconciler.observe(NAMESPACE, "ADDED", kept)
    taker = nlp_tenant(["old-data"])
    kube.objects[object_key(taker)] = copy.deepcopy(taker)
    reconciler.observe(TENANT, "ADDED", taker)
    drain(reconciler)
    assert labels_of(kube.objects[object_key(kept)]) == "nlp"
    assert in_namespace(kube, "old-data") >= RESTRICTIONS | GRANTS
    assert [e for e in kube.events if e["reason"] == "NamespaceHeldByAnotherTenant"] == []
