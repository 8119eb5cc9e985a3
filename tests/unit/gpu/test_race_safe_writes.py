"""Writes that lose no update under a race: the settled-pods shards and the Tenant finalizer."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from labgate.core.api_resources import Kind
from labgate.core.kube import ApiException, KubeApi
from labgate.core.tenant import FINALIZER
from labgate.gpu_accounting.ledger import GpuAmount, LedgerConflictError
from labgate.gpu_accounting.settled_pods import SettledPods
from rbac.reconciler import finalizer_added, finalizer_removed


class FakeConfigMaps:
    """ConfigMaps as the apiserver stores them: a PUT with a resourceVersion is a compare-and-swap,
    a PUT without one overwrites."""

    api = None

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0

    def lister(self, *args: Any, **kwargs: Any) -> Any:
        return lambda **_: None

    def get(self, kind: Kind, name: str, *, namespace: str | None = None, timeout: float = 10) -> Any:
        return copy.deepcopy(self.objects.get(name))

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[obj["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    def create(self, kind: Kind, obj: dict[str, Any], *, namespace: str | None = None) -> Any:
        if obj["metadata"]["name"] in self.objects:
            raise ApiException(status=409, reason="AlreadyExists")
        return self._store(obj)

    def replace(self, kind: Kind, obj: dict[str, Any]) -> Any:
        live = self.objects[obj["metadata"]["name"]]
        wanted = obj["metadata"].get("resourceVersion")
        if wanted is not None and wanted != live["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        return self._store(obj)


def _store(fake: FakeConfigMaps) -> SettledPods:
    kube: KubeApi = fake  # type: ignore[assignment]  # the calls SettledPods makes
    return SettledPods(kube, namespace="labgate-system")


def _same_shard_keys() -> tuple[str, str]:
    """Two pods whose records share a shard (new records fill one shard at a time)."""
    return "team-a/train-0", "team-a/train-1"


def _shard_holding(fake: FakeConfigMaps, key: str) -> dict[str, Any]:
    return next(obj for obj in fake.objects.values() if key in obj["data"]["pods"])


def test_a_deposed_leader_with_a_stale_shard_cannot_undo_the_new_leaders_write() -> None:
    fake = FakeConfigMaps()
    old_leader, new_leader = _store(fake), _store(fake)
    one, two = _same_shard_keys()
    eight = GpuAmount(total=8, by_model={"h100": 8})
    old_leader.write("team-a", {one: eight})
    new_leader.ensure_at_least("team-a", old_leader.versions("team-a"))
    new_leader.write("team-a", {one: eight, two: eight})
    with pytest.raises(LedgerConflictError):
        old_leader.write("team-a", {})  # it saw `one` end; its view predates the new leader's write
    # What the apiserver holds still counts both pods, and the loser now knows it.
    shard = _shard_holding(fake, one)
    assert two in shard["data"]["pods"]
    assert set(old_leader.pods("team-a")) == {one, two}


def _apply_json_patch(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """The three JSON Patch operations the reconciler sends, with RFC 6902 semantics."""
    result = copy.deepcopy(obj)
    for op in patch:
        *parents, last = [p for p in op["path"].split("/") if p]
        target: Any = result
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if op["op"] == "test":
            current = target[int(last)] if isinstance(target, list) else target.get(last)
            if current != op["value"]:
                raise ValueError(f"test failed at {op['path']}")
        elif op["op"] == "add":
            if isinstance(target, list):
                target.append(op["value"]) if last == "-" else target.insert(int(last), op["value"])
            else:
                target[last] = op["value"]
        elif op["op"] == "remove":
            del target[int(last)]
    return result


def test_adding_the_finalizer_fails_rather_than_drop_one_added_meanwhile() -> None:
    read = {"metadata": {"name": "team-a", "resourceVersion": "7", "finalizers": ["example.com/a"]}}
    # Another controller added its finalizer after our read.
    live = {
        "metadata": {
            "name": "team-a",
            "resourceVersion": "8",
            "finalizers": ["example.com/a", "example.com/b"],
        }
    }
    with pytest.raises(ValueError, match="test failed"):
        _apply_json_patch(live, finalizer_added(read))
    unchanged = _apply_json_patch(read, finalizer_added(read))
    assert unchanged["metadata"]["finalizers"] == ["example.com/a", FINALIZER]


def test_adding_the_first_finalizer_is_guarded_by_the_version_read() -> None:
    read = {"metadata": {"name": "team-a", "resourceVersion": "7"}}
    live = {"metadata": {"name": "team-a", "resourceVersion": "8", "finalizers": ["example.com/b"]}}
    with pytest.raises(ValueError, match="test failed"):
        _apply_json_patch(live, finalizer_added(read))
    assert _apply_json_patch(read, finalizer_added(read))["metadata"]["finalizers"] == [FINALIZER]


def test_removing_the_finalizer_removes_exactly_it() -> None:
    read = ("example.com/a", FINALIZER, "example.com/c")
    live = {"metadata": {"finalizers": list(read)}}
    assert _apply_json_patch(live, finalizer_removed(read))["metadata"]["finalizers"] == [
        "example.com/a",
        "example.com/c",
    ]
    moved = {"metadata": {"finalizers": [FINALIZER, "example.com/c"]}}  # changed since the read
    with pytest.raises(ValueError, match="test failed"):
        _apply_json_patch(moved, finalizer_removed(read))
