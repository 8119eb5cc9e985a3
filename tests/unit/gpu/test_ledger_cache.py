"""The GPU ledger's watch-fed cache (labgate.gpu_accounting.ledger_store.LedgerCache) over a fake of the
Kubernetes door with the apiserver's compare-and-swap, and a fake watch the test delivers through.
What a tenant would notice: GPUs admitted twice because the cache forgot a reservation (a watch
event older than the replica's own write), a corrupt ledger that admits instead of refusing, a
reservation the reconciler never hears of (held until it expires)."""

from __future__ import annotations

import asyncio
import copy
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import labgate.gpu_accounting.ledger
import labgate.gpu_accounting.ledger_store
from labgate.core.api_resources import Kind
from labgate.core.kube import ApiException, KubeApi
from labgate.gpu_accounting.ledger import (
    CONFIG_MAP,
    GpuAmount,
    Ledger,
    LedgerConflictError,
    LedgerCorruptError,
    config_map_from_ledger,
    usage,
    with_reservation,
)
from labgate.gpu_accounting.ledger_store import LEDGER_WRITERS, LedgerCache, LedgerStore

Object = dict[str, Any]
NAMESPACE = "labgate-system"
A100x2 = GpuAmount(total=2, by_model={"a100": 2})


class FakeConfigMaps:
    """ConfigMaps as the apiserver keeps them: create refuses an existing name, replace refuses a
    stale resourceVersion (409), every write gets the next version."""

    def __init__(self) -> None:
        self.api = None
        self.objects: dict[str, Object] = {}
        self.version = 100

    def lister(self, kind: Kind, **_: Any) -> Any:
        return lambda **__: {"items": []}

    def _stored(self, obj: Object) -> Object:
        self.version += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[stored["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    def get(self, kind: Kind, name: str, *, namespace: str | None = None, timeout: float = 10) -> Any:
        assert kind == CONFIG_MAP
        assert namespace == NAMESPACE
        return copy.deepcopy(self.objects.get(name))

    def create(self, kind: Kind, obj: Object, *, namespace: str | None = None) -> Any:
        if obj["metadata"]["name"] in self.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        return self._stored(obj)

    def replace(self, kind: Kind, obj: Object) -> Any:
        current = self.objects.get(obj["metadata"]["name"])
        if current is None:
            raise ApiException(status=404, reason="NotFound")
        if obj["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        return self._stored(obj)


class FakeWatch:
    """Stands in for the ledger ConfigMaps' watch; the test delivers the list and the events."""

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
        self.on_list = on_list
        self.on_event = on_event
        self.has_synced = threading.Event()

    def age(self) -> float:
        return 0.0

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class Replica:
    def __init__(self, cache: LedgerCache, watch: FakeWatch, api: FakeConfigMaps, woken: list[str]):
        self.cache, self.watch, self.api, self.woken = cache, watch, api, woken


@pytest.fixture
def api() -> FakeConfigMaps:
    return FakeConfigMaps()


@pytest.fixture
def replica(api: FakeConfigMaps, monkeypatch: pytest.MonkeyPatch) -> Iterator[Replica]:
    watches: list[FakeWatch] = []

    def make_watch(*args: Any, **kwargs: Any) -> FakeWatch:
        watches.append(FakeWatch(*args, **kwargs))
        return watches[-1]

    monkeypatch.setattr(labgate.gpu_accounting.ledger_store, "Reflector", make_watch)
    kube: KubeApi = api  # type: ignore[assignment]  # a fake of the calls the store makes
    woken: list[str] = []
    # The ledger's own writer threads, as the webhook's replica gives them (webhook/replica.py).
    writers = ThreadPoolExecutor(max_workers=LEDGER_WRITERS, thread_name_prefix="gpu-ledger")
    cache = LedgerCache(LedgerStore(kube, namespace=NAMESPACE), on_unsettled=woken.append, writers=writers)
    yield Replica(cache, watches[0], api, woken)
    writers.shutdown(wait=True)


def stored(ledger: Ledger, version: int, *, namespace: str = NAMESPACE) -> Object:
    obj = config_map_from_ledger(ledger, namespace=namespace)
    obj["metadata"]["resourceVersion"] = str(version)
    return obj


def test_an_admission_reads_the_listed_ledger_without_asking_the_api(replica: Replica) -> None:
    vision = with_reservation(Ledger(tenant="vision"), "uid-1", A100x2, now=0, pod="team-a/train-1")
    replica.watch.on_list([stored(vision, 5)])
    replica.api.objects.clear()  # the API has nothing to say: the cache must answer alone

    assert usage(replica.cache.cached("vision")) == A100x2
    assert replica.cache.cached("speech") == Ledger(tenant="speech")  # no ledger yet: nothing used


def test_a_watch_event_older_than_the_replicas_own_write_does_not_forget_a_reservation(
    replica: Replica,
) -> None:
    """Otherwise the next pod is decided as if the GPUs just reserved were free (over quota)."""
    replica.watch.on_list([])
    first = replica.cache.write(with_reservation(Ledger(tenant="vision"), "uid-1", A100x2, now=0))
    second = replica.cache.write(with_reservation(first, "uid-2", A100x2, now=0))
    assert usage(replica.cache.cached("vision")).total == 4

    # The watch catches up late: the first write's event arrives after the second write.
    replica.watch.on_event("ADDED", config_map_from_ledger(first, namespace=NAMESPACE))
    assert usage(replica.cache.cached("vision")).total == 4
    assert replica.cache.cached("vision").resource_version == second.resource_version


def test_another_replicas_newer_write_replaces_what_this_one_knows(replica: Replica) -> None:
    replica.watch.on_list([stored(Ledger(tenant="vision"), 5)])
    theirs = with_reservation(Ledger(tenant="vision"), "uid-9", A100x2, now=0)
    replica.watch.on_event("MODIFIED", stored(theirs, 6))
    assert usage(replica.cache.cached("vision")) == A100x2


def test_a_lost_compare_and_swap_raises_and_a_fresh_read_sees_the_winner(replica: Replica) -> None:
    replica.watch.on_list([])
    base = replica.cache.write(Ledger(tenant="vision"))
    # Another replica wins the race for the same version.
    winner = replica.cache.store.write(with_reservation(base, "uid-other", A100x2, now=0))

    with pytest.raises(LedgerConflictError):
        replica.cache.write(with_reservation(base, "uid-mine", A100x2, now=0))
    fresh = replica.cache.fresh("vision")
    assert set(fresh.reservations) == {"uid-other"}
    assert fresh.resource_version == winner.resource_version
    assert replica.cache.cached("vision") == fresh


def test_two_replicas_creating_the_first_ledger_cannot_both_win(replica: Replica) -> None:
    replica.watch.on_list([])
    replica.cache.write(with_reservation(Ledger(tenant="vision"), "uid-1", A100x2, now=0))
    with pytest.raises(LedgerConflictError):
        replica.cache.write(with_reservation(Ledger(tenant="vision"), "uid-2", A100x2, now=0))


def test_a_corrupt_ledger_refuses_that_tenants_gpu_pods_only_until_repaired(replica: Replica) -> None:
    broken = stored(Ledger(tenant="vision"), 5)
    broken["data"]["reservations"] = "not json"
    replica.watch.on_list([broken, stored(Ledger(tenant="speech"), 6)])

    with pytest.raises(LedgerCorruptError, match="vision"):
        replica.cache.cached("vision")
    assert replica.cache.cached("speech") == Ledger(tenant="speech", resource_version="6")

    replica.watch.on_event("MODIFIED", stored(Ledger(tenant="vision"), 7))
    assert replica.cache.cached("vision").resource_version == "7"


def test_a_ledger_that_turns_corrupt_in_an_event_is_refused(replica: Replica) -> None:
    replica.watch.on_list([stored(Ledger(tenant="vision"), 5)])
    broken = stored(Ledger(tenant="vision"), 6)
    broken["data"]["settled"] = '{"total": "many"}'
    replica.watch.on_event("MODIFIED", broken)
    with pytest.raises(LedgerCorruptError):
        replica.cache.cached("vision")


def test_a_deleted_ledger_is_forgotten(replica: Replica) -> None:
    vision = with_reservation(Ledger(tenant="vision"), "uid-1", A100x2, now=0)
    replica.watch.on_list([stored(vision, 5)])
    replica.watch.on_event("DELETED", stored(vision, 6))
    assert replica.cache.cached("vision") == Ledger(tenant="vision")


def test_only_ledgers_in_labgates_namespace_count(replica: Replica) -> None:
    """A ConfigMap with a ledger's name and label elsewhere (a tenant made it) changes nothing."""
    forged = stored(Ledger(tenant="vision"), 9, namespace="team-a")
    replica.watch.on_list([forged])
    replica.watch.on_event("ADDED", forged)
    assert replica.cache.cached("vision") == Ledger(tenant="vision")


def test_the_reconciler_is_woken_for_ledgers_holding_reservations_only(replica: Replica) -> None:
    held = with_reservation(Ledger(tenant="vision"), "uid-1", A100x2, now=0)
    replica.watch.on_list([stored(held, 5), stored(Ledger(tenant="speech"), 6)])
    assert replica.woken == ["vision"]

    replica.woken.clear()
    replica.watch.on_event(
        "MODIFIED", stored(with_reservation(Ledger(tenant="speech"), "u", A100x2, now=0), 7)
    )
    replica.watch.on_event("MODIFIED", stored(Ledger(tenant="vision"), 8))  # settled: nothing to do
    assert replica.woken == ["speech"]


def test_the_watch_event_of_a_write_still_under_way_gives_the_written_ledger(
    replica: Replica, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watch can deliver this replica's own write before the write's answer comes back; the cache
    must then hold exactly what was written (the reservation and the new version), not the old one."""
    replica.watch.on_list([])
    base = replica.cache.write(Ledger(tenant="vision"))
    stored_replace = replica.api.replace

    def replace_and_deliver_the_event_first(kind: Kind, obj: Object) -> Any:
        result = stored_replace(kind, obj)
        replica.watch.on_event("MODIFIED", copy.deepcopy(result))
        seen = replica.cache.cached("vision")
        assert seen.resource_version == result["metadata"]["resourceVersion"]
        assert set(seen.reservations) == {"uid-1"}
        return result

    monkeypatch.setattr(replica.api, "replace", replace_and_deliver_the_event_first)
    written = replica.cache.write(with_reservation(base, "uid-1", A100x2, now=0))
    assert replica.cache.cached("vision") == written
    assert usage(written) == A100x2


def test_two_threads_remembering_at_once_keep_the_newer_ledger(
    replica: Replica, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write's answer and a watch event remembered at the same moment: comparing the versions and
    replacing the ledger is one step, or the older one could overwrite the newer (GPUs reserved in
    the newer one forgotten, and admitted twice)."""
    replica.watch.on_list([stored(Ledger(tenant="vision"), 3)])
    older = Ledger(tenant="vision", resource_version="5")
    newest = with_reservation(Ledger(tenant="vision"), "uid-1", A100x2, now=0).model_copy(
        update={"resource_version": "7"}
    )
    compared = threading.Event()
    resume = threading.Event()
    compare = labgate.gpu_accounting.ledger.newer

    def newer_pausing_the_older_thread(a: str | None, b: str | None) -> bool:
        answer = compare(a, b)
        if threading.current_thread().name == "older":
            compared.set()  # it has compared 5 with 3 and is about to keep 5
            resume.wait(timeout=5)
        return answer

    monkeypatch.setattr(labgate.gpu_accounting.ledger_store, "newer", newer_pausing_the_older_thread)
    first = threading.Thread(target=replica.cache.remember, args=(older,), name="older")
    first.start()
    assert compared.wait(timeout=5)
    second = threading.Thread(target=replica.cache.remember, args=(newest,), name="newer")
    second.start()
    # Without the lock the newer ledger is kept in this time and then overwritten; with it, the
    # second thread waits for the first and compares against what the first kept.
    second.join(timeout=0.2)
    resume.set()
    first.join(timeout=5)
    second.join(timeout=5)

    assert replica.cache.cached("vision") == newest
    assert usage(replica.cache.cached("vision")) == A100x2


def test_ledger_writes_do_not_wait_for_the_event_loops_busy_default_threads(replica: Replica) -> None:
    """The default executor runs every API read-through (namespaces, volumes, claims, pull
    secrets); a burst of them must not hold up the ledger's compare-and-swap, which a GPU pod's
    answer waits for."""
    replica.watch.on_list([])

    async def write_while_the_default_threads_are_busy() -> Ledger:
        loop = asyncio.get_running_loop()
        default = ThreadPoolExecutor(max_workers=1)
        loop.set_default_executor(default)
        released = threading.Event()
        busy = loop.run_in_executor(None, released.wait, 5)  # the only default thread is taken
        try:
            reserved = with_reservation(Ledger(tenant="vision"), "uid-1", A100x2, now=0)
            written = await asyncio.wait_for(replica.cache.write_async(reserved), timeout=2)
            fresh = await asyncio.wait_for(replica.cache.fresh_async("vision"), timeout=2)
            assert fresh == written
            return written
        finally:
            released.set()
            await busy

    written = asyncio.run(write_while_the_default_threads_are_busy())
    assert replica.cache.cached("vision") == written
    assert set(written.reservations) == {"uid-1"}
    replica.cache.stop()
