"""The settled-pods store's writes per settlement (issue 21): new records fill one shard at a time,
so settling a burst of pods rewrites one shard, not all eight; every record is still found."""

from __future__ import annotations

import json
from typing import Any

from labgate.core.kube import KubeApi
from labgate.gpu_accounting.ledger import GpuAmount
from labgate.gpu_accounting.settled_pods import (
    SETTLED_SHARDS,
    SettledPods,
    placed_in_shards,
    record_size,
    settled_name,
    split_into_shards,
)
from tests.unit.gpu.test_race_safe_writes import FakeConfigMaps

ONE = GpuAmount(total=1, by_model={"h100": 1})


class CountingConfigMaps(FakeConfigMaps):
    """The apiserver's ConfigMaps, each write counted."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        return super()._store(obj)


def _store(fake: FakeConfigMaps) -> SettledPods:
    kube: KubeApi = fake  # type: ignore[assignment]  # the calls SettledPods makes
    return SettledPods(kube, namespace="labgate-system")


def _uid(i: int) -> str:
    return f"{i:08d}-0000-4000-8000-000000000000"


def test_a_burst_settled_in_ten_passes_rewrites_one_shard_a_pass() -> None:
    fake = CountingConfigMaps()
    store = _store(fake)
    pods: dict[str, GpuAmount] = {}
    for settlement in range(10):
        pods.update({_uid(settlement * 10 + i): ONE for i in range(10)})
        store.write("vision", dict(pods))
    assert fake.writes == 10  # before: up to 8 shards a pass (about 80 writes)
    assert store.pods("vision") == pods
    # What the apiserver holds: one shard with all 100 records.
    assert list(fake.objects) == [settled_name("vision", 0)]
    assert set(json.loads(fake.objects[settled_name("vision", 0)]["data"]["pods"])) == set(pods)


def test_a_pod_that_ends_rewrites_only_the_shard_that_holds_it() -> None:
    fake = CountingConfigMaps()
    store = _store(fake)
    pods = {_uid(i): ONE for i in range(100)}
    store.write("vision", pods)
    before = fake.writes
    del pods[_uid(42)]
    store.write("vision", pods)
    assert fake.writes == before + 1
    assert _uid(42) not in store.pods("vision")
    assert len(store.pods("vision")) == 99


def test_records_placed_by_the_old_hash_stay_where_they_are() -> None:
    old = {_uid(i): ONE for i in range(40)}
    current = split_into_shards(old)
    placed = placed_in_shards({**old, _uid(99): ONE}, current)
    assert all(placed[shard].items() >= part.items() for shard, part in current.items())
    assert [shard for shard, part in placed.items() if _uid(99) in part] == [0]
    assert sum(len(part) for part in placed.values()) == 41


def test_new_records_spill_into_the_next_shard_when_one_is_full() -> None:
    room_for_ten = 10 * record_size(_uid(0), ONE)
    placed = placed_in_shards({_uid(i): ONE for i in range(25)}, {}, capacity=room_for_ten)
    assert [len(placed[shard]) for shard in range(SETTLED_SHARDS)] == [10, 10, 5, 0, 0, 0, 0, 0]
    full = placed_in_shards({_uid(i): ONE for i in range(90)}, {}, capacity=room_for_ten)
    assert sum(len(part) for part in full.values()) == 90  # never dropped, even past capacity


def test_a_record_found_in_two_shards_is_kept_once() -> None:
    twice = {0: {_uid(1): ONE}, 3: {_uid(1): ONE}}
    placed = placed_in_shards({_uid(1): ONE}, twice)
    assert [shard for shard, part in placed.items() if part] == [0]
