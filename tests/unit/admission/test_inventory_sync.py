"""The inventory sync (webhook.inventory.InventorySync) and its push into OPA
(webhook.inventory_push.InventoryPush) against fakes of what they talk to: the watches that feed the
copy (a fake Reflector the test delivers lists and events through), the API it reads through on a
miss (a fake KubeApi) and OPA's data.inventory (a fake InventoryWriter). What a researcher would
notice: a namespace or Tenant change that never reaches OPA (decided on an old owner), a webhook that
refuses as stale while the API is fine, a pod racing its namespace decided without its tenant."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

import webhook.inventory
from labgate.core.api_resources import NAMESPACE, TENANT, Kind
from labgate.core.tenant import TENANT_LABEL
from webhook.inventory import InventorySync, empty_snapshot
from webhook.inventory_push import InventoryPush, patch_of
from webhook.inventory_snapshot import PatchOperation
from webhook.tenant_status_facts import TenantStatusFacts

Object = dict[str, Any]


class FakeReflector:
    """Stands in for a watch: the test delivers its list and events (as Reflector calls back)."""

    def __init__(
        self,
        name: str,
        api: Any,
        list_function: Any,
        *,
        on_list: Callable[[list[Object]], None],
        on_event: Callable[[str, Object], None],
        watch_timeout_seconds: int = 10,
    ) -> None:
        self.name = name
        self.on_list = on_list
        self.on_event = on_event
        self.has_synced = threading.Event()

    def deliver_list(self, objects: list[Object]) -> None:
        self.on_list(objects)  # as Reflector does: synced only once the consumer took the list
        self.has_synced.set()

    def age(self) -> float:
        return 0.0 if self.has_synced.is_set() else float("inf")

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class FakeKube:
    """The reads InventorySync makes through the Kubernetes door."""

    api = None  # the reflectors' client (the reflectors are fakes too)

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], Object] = {}
        self.gets: list[tuple[str, str]] = []

    def lister(self, kind: Kind, **_: Any) -> Any:
        return lambda **__: {"items": []}

    def get(self, kind: Kind, name: str, *, namespace: str | None = None, timeout: float = 10) -> Any:
        self.gets.append((kind.kind, name))
        return copy.deepcopy(self.objects.get((kind.kind, name)))


class FakeOpa:
    """data.inventory as OPA holds it, with the three writes InventorySync makes."""

    def __init__(self) -> None:
        self.inventory: dict[str, Any] | None = None
        self.patches: list[list[PatchOperation]] = []
        self.is_down = False
        self.lost_inventory = False  # a policy reload dropped pushed data: patches fail
        self.closed = False
        self.refused = 0  # writes refused while down
        self.changed = threading.Condition()

    def _check(self) -> None:
        if self.is_down:
            with self.changed:
                self.refused += 1
                self.changed.notify_all()
            raise ConnectionRefusedError("OPA is down")

    def replace_all(self, inventory: dict[str, Any]) -> None:
        self._check()
        with self.changed:
            self.inventory = copy.deepcopy(inventory)
            self.lost_inventory = False
            self.changed.notify_all()

    def put(self, collection: str, name: str, document: dict[str, Any]) -> None:
        self._check()
        assert self.inventory is not None
        with self.changed:
            self.inventory[collection][name] = copy.deepcopy(document)
            self.changed.notify_all()

    def patch(self, operations: list[PatchOperation]) -> None:
        self._check()
        if self.lost_inventory or self.inventory is None:
            raise RuntimeError("OPA: inventory path not found")
        with self.changed:
            self.patches.append(copy.deepcopy(operations))
            for op in operations:
                _, collection, name = op["path"].split("/")
                if op["op"] == "remove":
                    self.inventory[collection].pop(name, None)
                else:
                    self.inventory[collection][name] = copy.deepcopy(op["value"])
            self.changed.notify_all()

    def close(self) -> None:
        self.closed = True

    def wait_for(self, condition: Callable[[], bool], timeout: float = 5.0) -> None:
        """Until `condition` holds (the pusher is a thread), bounded."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not condition():
                remaining = deadline - time.monotonic()
                assert remaining > 0, f"OPA's inventory never got there: {self.inventory}"
                self.changed.wait(remaining)


def namespace(name: str, tenant: str | None = None, **labels: str) -> Object:
    all_labels = {"kubernetes.io/metadata.name": name, **labels}
    if tenant:
        all_labels[TENANT_LABEL] = tenant
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": all_labels}}


def tenant(name: str, *researchers: str, status: Object | None = None) -> Object:
    return {
        "apiVersion": "labgate.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": name},
        "spec": {"members": {"researchers": [{"kind": "User", "name": r} for r in researchers]}},
        "status": status or {},
    }


@dataclass
class Sync:
    sync: InventorySync
    push: InventoryPush
    reflectors: dict[str, FakeReflector]
    kube: FakeKube
    opa: FakeOpa
    statuses: TenantStatusFacts  # fed by the sync's Tenant watch, as webhook.replica wires them

    def list_everything(self, namespaces: list[Object], tenants: list[Object]) -> None:
        self.reflectors["namespaces"].deliver_list(namespaces)
        self.reflectors["tenants"].deliver_list(tenants)
        self.reflectors["priority_classes"].deliver_list([])


@pytest.fixture
def sync(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sync]:
    reflectors: dict[str, FakeReflector] = {}

    def make_reflector(name: str, *args: Any, **kwargs: Any) -> FakeReflector:
        reflectors[name] = FakeReflector(name, *args, **kwargs)
        return reflectors[name]

    kube = FakeKube()
    monkeypatch.setattr(webhook.inventory, "Reflector", make_reflector)
    opa = FakeOpa()
    statuses = TenantStatusFacts()
    push = InventoryPush(
        opa, empty_snapshot(platform_namespace="labgate-system", exempt_namespaces=("monitoring",))
    )
    inventory = InventorySync(kube, push, tenant_seen=statuses.remember_status)  # type: ignore[arg-type]
    push.start()  # the pusher thread
    inventory.start()  # the fake watches wait for the test
    yield Sync(inventory, push, reflectors, kube, opa, statuses)
    inventory.stop()
    push.stop()
    assert opa.closed


def test_the_listed_cluster_is_written_whole_and_the_webhook_is_ready_only_then(sync: Sync) -> None:
    sync.reflectors["namespaces"].deliver_list([namespace("team-a", "vision"), namespace("default")])
    assert not sync.sync.is_synced  # Tenants not listed yet: no decision may use this copy
    sync.reflectors["tenants"].deliver_list([tenant("vision", "alice")])
    sync.reflectors["priority_classes"].deliver_list([])

    assert sync.sync.is_synced
    assert sync.opa.inventory is not None
    assert set(sync.opa.inventory["namespaces"]) == {"team-a", "default"}
    assert set(sync.opa.inventory["tenants"]) == {"vision"}
    # What the webhook registrations leave out, for tenant-namespace-conflict.
    assert sync.opa.inventory["platform"] == {
        "namespace": "labgate-system",
        "exempt_namespaces": ["monitoring"],
    }
    assert sync.sync.tenant_of("team-a") == "vision"
    assert sync.sync.tenant_of("default") is None


def test_every_list_raises_the_revision_the_webhook_checks_opa_still_holds(sync: Sync) -> None:
    sync.list_everything([namespace("team-a", "vision")], [tenant("vision")])
    assert sync.opa.inventory is not None
    first = sync.opa.inventory["revision"]
    sync.reflectors["namespaces"].deliver_list([namespace("team-a", "vision")])
    assert sync.opa.inventory["revision"] > first


def test_a_relabelled_namespace_reaches_opa_and_a_deleted_one_leaves_it(sync: Sync) -> None:
    sync.list_everything([namespace("team-a", "vision"), namespace("scratch", "vision")], [tenant("vision")])

    sync.reflectors["namespaces"].on_event("MODIFIED", namespace("team-a", "speech"))
    sync.reflectors["namespaces"].on_event("DELETED", namespace("scratch", "vision"))

    def applied() -> bool:
        inventory = sync.opa.inventory or {}
        namespaces = inventory.get("namespaces", {})
        return "scratch" not in namespaces and namespaces["team-a"]["labels"][TENANT_LABEL] == "speech"

    sync.opa.wait_for(applied)
    assert sync.sync.tenant_of("team-a") == "speech"


def test_a_burst_of_changes_is_written_in_few_patches(sync: Sync) -> None:
    sync.list_everything([], [tenant("vision")])
    events = sync.reflectors["namespaces"]
    # Hold the pusher off while the burst arrives, as a pusher busy writing to a slow OPA would be.
    with sync.push._push_lock:
        for i in range(200):
            events.on_event("ADDED", namespace(f"ns-{i}", "vision"))
    sync.opa.wait_for(lambda: len((sync.opa.inventory or {}).get("namespaces", {})) == 200)
    # One JSON Patch for the burst (thousands of PUTs queued behind each other would lag behind
    # the cluster by minutes).
    assert len(sync.opa.patches) == 1, [len(p) for p in sync.opa.patches]


def test_a_status_only_change_of_a_tenant_writes_nothing(sync: Sync) -> None:
    sync.list_everything([namespace("team-a", "vision")], [tenant("vision", "alice")])
    sync.reflectors["tenants"].on_event("MODIFIED", tenant("vision", "alice", status={"ready": True}))
    sync.reflectors["tenants"].on_event("MODIFIED", tenant("vision", "alice", "bob"))  # a real change
    sync.opa.wait_for(lambda: len(sync.opa.patches) >= 1)
    assert [op["path"] for patch in sync.opa.patches for op in patch] == ["/tenants/vision"]


# Issue 22 item 6: refusals quote what pods not yet scheduled hold, as the Tenant's status says it;
# kept beside the inventory, never pushed to OPA (the status changes often and decides nothing).
def test_what_pods_not_yet_scheduled_hold_is_kept_from_the_status_and_not_pushed(sync: Sync) -> None:
    sync.list_everything([namespace("team-a", "vision")], [tenant("vision", "alice")])
    assert sync.statuses.held_by_unscheduled("vision") is None
    waiting = {"gpu": {"heldByUnscheduled": 8, "unscheduledPods": ["gpu-experiment-dzjhx"]}}
    sync.reflectors["tenants"].on_event("MODIFIED", tenant("vision", "alice", status=waiting))
    assert sync.statuses.held_by_unscheduled("vision") == {
        "gpus": 8,
        "pods": ["gpu-experiment-dzjhx"],
        "all_named": True,
    }
    sync.reflectors["tenants"].on_event("MODIFIED", tenant("vision", "alice", "bob"))  # a real change
    sync.opa.wait_for(lambda: len(sync.opa.patches) >= 1)
    assert [op["path"] for patch in sync.opa.patches for op in patch] == ["/tenants/vision"]
    assert "status" not in (sync.opa.inventory or {})["tenants"]["vision"]
    assert sync.statuses.held_by_unscheduled("vision") is None  # its pod was bound since


# Issue 20: where Kueue runs, its WorkloadPriorityClasses' values reach the policies (queue-priority).
def test_with_kueue_workload_priority_classes_are_watched_and_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reflectors: dict[str, FakeReflector] = {}

    def make_reflector(name: str, *args: Any, **kwargs: Any) -> FakeReflector:
        reflectors[name] = FakeReflector(name, *args, **kwargs)
        return reflectors[name]

    monkeypatch.setattr(webhook.inventory, "Reflector", make_reflector)
    assert "workload_priority_classes" not in reflectors
    opa = FakeOpa()
    push = InventoryPush(opa, empty_snapshot(platform_namespace="labgate-system", kueue=True))
    inventory = InventorySync(FakeKube(), push, kueue=True)  # type: ignore[arg-type]
    push.start()
    inventory.start()
    try:
        for name in ("namespaces", "tenants", "priority_classes"):
            reflectors[name].deliver_list([])
        assert not inventory.is_synced  # its WorkloadPriorityClasses not listed yet
        urgent = {"metadata": {"name": "urgent"}, "value": 100000, "description": "x"}
        reflectors["workload_priority_classes"].deliver_list([urgent])
        assert inventory.is_synced
        assert (opa.inventory or {})["workload_priority_classes"] == {"urgent": {"value": 100000}}
    finally:
        inventory.stop()
        push.stop()


def test_without_kueue_no_workload_priority_class_is_watched(sync: Sync) -> None:
    assert "workload_priority_classes" not in sync.reflectors


# Issue 20: queue-wait quotes what Kueue holds queued, from the status too, never pushed.
def test_what_kueue_holds_queued_is_kept_from_the_status(sync: Sync) -> None:
    sync.list_everything([namespace("team-a", "vision")], [tenant("vision", "alice")])
    assert sync.statuses.queued_in_kueue("vision") is None
    queued = {"gpu": {"queuedWorkloads": 1, "queuedGpus": 32}}
    sync.reflectors["tenants"].on_event("MODIFIED", tenant("vision", "alice", status=queued))
    assert sync.statuses.queued_in_kueue("vision") == {"workloads": 1, "gpus": 32}
    assert "status" not in (sync.opa.inventory or {})["tenants"]["vision"]


def test_when_opa_lost_the_inventory_the_change_comes_with_the_whole_of_it(sync: Sync) -> None:
    sync.list_everything([namespace("team-a", "vision")], [tenant("vision")])
    sync.opa.lost_inventory = True  # OPA restarted its policies and forgot data.inventory

    sync.reflectors["namespaces"].on_event("ADDED", namespace("team-b", "vision"))

    sync.opa.wait_for(lambda: not sync.opa.lost_inventory)
    assert sync.opa.inventory is not None
    assert set(sync.opa.inventory["namespaces"]) == {"team-a", "team-b"}
    assert set(sync.opa.inventory["tenants"]) == {"vision"}


def test_an_unreachable_opa_after_the_first_sync_does_not_make_the_api_look_stale(sync: Sync) -> None:
    sync.list_everything([namespace("team-a", "vision")], [tenant("vision")])
    sync.opa.is_down = True
    # A re-list while OPA is down: the copy is fresh (the decision refuses as OPA being down instead).
    sync.reflectors["namespaces"].deliver_list([namespace("team-a", "vision"), namespace("team-b", "vision")])
    assert sync.sync.tenant_of("team-b") == "vision"
    assert sync.sync.is_synced


def test_before_the_first_sync_an_unreachable_opa_fails_the_list(sync: Sync) -> None:
    sync.opa.is_down = True
    with pytest.raises(ConnectionRefusedError):
        sync.reflectors["namespaces"].deliver_list([namespace("team-a", "vision")])
    assert not sync.reflectors["namespaces"].has_synced.is_set()


def test_a_pod_racing_its_new_namespace_reads_the_namespace_and_its_tenant_through(sync: Sync) -> None:
    sync.list_everything([], [])
    sync.kube.objects[NAMESPACE.kind, "team-new"] = namespace("team-new", "vision")
    sync.kube.objects[TENANT.kind, "vision"] = tenant("vision", "alice")
    assert not sync.sync.is_known("team-new")

    sync.sync.ensure_namespace("team-new")

    assert sync.sync.is_known("team-new")
    assert sync.sync.tenant_of("team-new") == "vision"
    assert sync.opa.inventory is not None
    assert "team-new" in sync.opa.inventory["namespaces"]  # written at once, for this very request
    assert sync.opa.inventory["tenants"]["vision"]["spec"]["members"]["researchers"][0]["name"] == "alice"
    # Known now: the next pod reads nothing through.
    sync.kube.gets.clear()
    sync.sync.ensure_namespace("team-new")
    assert sync.kube.gets == []


def test_a_namespace_the_api_does_not_have_is_not_invented(sync: Sync) -> None:
    sync.list_everything([], [])
    sync.sync.ensure_namespace("nowhere")
    assert not sync.sync.is_known("nowhere")
    assert sync.sync.tenant_of("nowhere") is None


class SlowToCopy(str):
    """A label value whose copy waits until released: it stands for an inventory so large that
    copying it takes a while."""

    copying = threading.Event()
    released = threading.Event()

    def __deepcopy__(self, memo: dict[int, Any]) -> str:
        SlowToCopy.copying.set()
        assert SlowToCopy.released.wait(timeout=5)
        return str(self)


def test_a_reader_is_answered_while_the_whole_inventory_is_copied_out_for_opa(sync: Sync) -> None:
    """Every admission asks the inventory (tenant_of, is_known) on the event loop: a push of the
    whole inventory (after OPA lost it) must not make it wait for a copy of thousands of documents."""
    SlowToCopy.released.set()
    sync.list_everything([namespace("team-a", "vision", size=SlowToCopy("large"))], [tenant("vision")])
    SlowToCopy.released.clear()
    SlowToCopy.copying.clear()
    push = threading.Thread(target=sync.sync.push_all)
    push.start()
    try:
        assert SlowToCopy.copying.wait(timeout=5)  # the inventory is being copied (by OPA's client here)
        answers: list[str | None] = []
        reader = threading.Thread(target=lambda: answers.append(sync.sync.tenant_of("team-a")))
        reader.start()
        reader.join(timeout=2)
        assert answers == ["vision"]
    finally:
        SlowToCopy.released.set()
        push.join(timeout=5)
    assert sync.opa.inventory is not None
    assert sync.opa.inventory["namespaces"]["team-a"]["labels"]["size"] == "large"


def test_a_snapshot_stays_as_it_was_while_the_watches_change_the_inventory(sync: Sync) -> None:
    sync.list_everything([namespace("team-a", "vision")], [tenant("vision")])
    before = sync.sync.snapshot

    sync.reflectors["namespaces"].on_event("MODIFIED", namespace("team-a", "speech"))
    sync.reflectors["namespaces"].on_event("ADDED", namespace("team-b", "vision"))
    sync.reflectors["tenants"].on_event("DELETED", tenant("vision"))

    assert set(before.namespaces) == {"team-a"}
    assert before.namespaces["team-a"]["labels"][TENANT_LABEL] == "vision"
    assert set(before.tenants) == {"vision"}
    after = sync.sync.snapshot
    assert set(after.namespaces) == {"team-a", "team-b"}
    assert after.namespaces["team-a"]["labels"][TENANT_LABEL] == "speech"
    assert set(after.tenants) == set()
    assert sync.sync.tenant_of("team-a") == "speech"


# Issue 22 item 6: gpu-quota's Fix names the largest node of the tenant's pools, as its status says.
def test_what_the_pools_nodes_hold_is_kept_from_the_status_and_not_pushed(sync: Sync) -> None:
    sync.list_everything([namespace("team-a", "vision")], [tenant("vision", "alice")])
    assert sync.statuses.pool_gpus("vision") is None
    measured = {
        "observedGeneration": 2,
        "gpu": {"pools": {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}},
    }
    current = {**tenant("vision", "alice", status=measured), "metadata": {"name": "vision", "generation": 2}}
    sync.reflectors["tenants"].on_event("MODIFIED", current)
    assert sync.statuses.pool_gpus("vision") == {"h100": {"gpus": 16, "nodes": 2, "largestNode": 8}}
    # A spec the status has not caught up with (its pools may be others): not its nodes.
    newer = {**current, "metadata": {"name": "vision", "generation": 3}}
    sync.reflectors["tenants"].on_event("MODIFIED", newer)
    assert sync.statuses.pool_gpus("vision") is None
    sync.opa.wait_for(lambda: len(sync.opa.patches) >= 1)
    assert "status" not in (sync.opa.inventory or {})["tenants"]["vision"]


# Issue 28 item 5: where a pod without tolerations can land, kept from the status and not pushed.
def test_the_open_nodes_are_kept_from_the_status_and_not_pushed(sync: Sync) -> None:
    sync.list_everything([namespace("team-a", "vision")], [tenant("vision", "alice")])
    assert sync.statuses.open_nodes("vision") is None
    nodes = {"untainted": 0, "tainted": 3, "taintKeys": ["labgate.io/pool"]}
    sync.reflectors["tenants"].on_event("MODIFIED", tenant("vision", "alice", status={"nodes": nodes}))
    assert sync.statuses.open_nodes("vision") == {
        "untainted": 0,
        "tainted": 3,
        "taint_keys": ["labgate.io/pool"],
        "more_taint_keys": 0,
    }
    sync.opa.wait_for(lambda: "vision" in (sync.opa.inventory or {}).get("tenants", {}))
    assert "status" not in (sync.opa.inventory or {})["tenants"]["vision"]


def test_a_name_with_a_slash_or_a_tilde_is_one_path_segment_of_the_patch() -> None:
    # JSON Pointer escapes (RFC 6901): unescaped, "a/b" would write into a document "a"'s field "b".
    snapshot = empty_snapshot(platform_namespace="labgate-system").with_document(
        "priority_classes", "a/b~c", {"value": 7}
    )
    patch = patch_of(snapshot, {("priority_classes", "a/b~c"), ("namespaces", "gone")})
    assert patch == [
        {"op": "remove", "path": "/namespaces/gone"},
        {"op": "add", "path": "/priority_classes/a~1b~0c", "value": {"value": 7}},
    ]


def test_a_change_the_pusher_could_not_write_anywhere_is_written_once_opa_is_back(sync: Sync) -> None:
    sync.list_everything([namespace("team-a", "vision")], [tenant("vision")])
    writes = sync.push.writes
    sync.opa.is_down = True
    sync.reflectors["namespaces"].on_event("ADDED", namespace("team-b", "vision"))
    sync.opa.wait_for(lambda: sync.opa.refused >= 2)  # the patch, then the whole inventory
    assert "team-b" not in (sync.opa.inventory or {})["namespaces"]
    assert sync.push.writes == writes  # a decision may still be reused: OPA holds what it held
    sync.opa.is_down = False
    sync.opa.wait_for(lambda: "team-b" in (sync.opa.inventory or {}).get("namespaces", {}))
    assert sync.push.writes > writes  # now it is not
