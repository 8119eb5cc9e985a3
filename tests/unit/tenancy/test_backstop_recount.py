"""The GPU backstop's count given back (rbac/backstop_recount.py): what it counts, when it looks, and
that it never writes below what the pods hold nor over a newer version. On the real apiserver and
quota controller: tests/e2e/test_backstop_recount.py."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import pytest

from labgate.core.api_resources import RESOURCE_QUOTA, Kind, Object
from labgate.core.gpu_amount import GpuAmount
from labgate.core.kube import ApiException, KubeApi
from labgate.core.tenant import MANAGED_BY, MANAGED_BY_LABEL, PREEMPTIBLE_PRIORITY_CLASS, TENANT_LABEL
from labgate.gpu_accounting.settlement import PodFacts
from rbac.backstop_recount import QUOTA_KEY, BackstopRecount, backstop_usage, charged, given_back
from rbac.runtime import ObjectCache
from rbac.tenant_events import TenantEvents


def pod(
    gpus: str, *, phase: str = "Running", priority_class: str | None = None, init: str | None = None
) -> Object:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}}}]
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if init:
        spec["initContainers"] = [{"name": "fetch", "resources": {"requests": {"nvidia.com/gpu": init}}}]
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


def quota(used: str | None, *, version: str = "7", namespace: str = "vision-a") -> Object:
    status: dict[str, Any] = {"hard": {QUOTA_KEY: "10"}}
    if used is not None:
        status["used"] = {QUOTA_KEY: used, "count/pods": "3"}
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "labgate-gpu",
            "namespace": namespace,
            "resourceVersion": version,
            "labels": {TENANT_LABEL: "vision", MANAGED_BY_LABEL: MANAGED_BY},
        },
        "spec": {"hard": {QUOTA_KEY: "10"}},
        "status": status,
    }


def test_the_backstop_counts_what_kubernetes_counts_or_more() -> None:
    pods = [
        pod("2"),
        pod("1", phase="Pending"),
        pod("1", init="3"),  # the largest init container: 3
        pod("4", phase="Succeeded"),  # finished: Kubernetes no longer counts it
        pod("4", phase="Failed"),
        pod("8", priority_class=PREEMPTIBLE_PRIORITY_CLASS),  # outside the backstop's scope
        pod("500m"),  # a fraction: rounded up
    ]
    assert backstop_usage(pods) == 2 + 1 + 3 + 1
    assert backstop_usage([]) == 0


@pytest.mark.parametrize(("used", "count"), [("10", 10), ("10k", 10_000), ("1500m", 2), (None, None)])
def test_the_charge_is_read_as_a_quantity(used: str | None, count: int | None) -> None:
    assert charged(quota(used)) == count


def test_a_charge_above_the_pods_is_lowered_to_them_on_the_version_read() -> None:
    corrected = given_back(quota("10"), 6)
    assert corrected is not None
    assert corrected["status"]["used"] == {QUOTA_KEY: "6", "count/pods": "3"}
    assert corrected["status"]["hard"] == {QUOTA_KEY: "10"}
    assert corrected["metadata"]["resourceVersion"] == "7"  # the precondition of the write


@pytest.mark.parametrize(("used", "usage"), [("6", 6), ("5", 6), (None, 0)])
def test_a_charge_not_above_the_pods_is_left_alone(used: str | None, usage: int) -> None:
    assert given_back(quota(used), usage) is None


class RecordingKube:
    """The three calls the recount makes, answered from what the test set (the apiserver's
    behaviour is in tests/e2e/test_backstop_recount.py)."""

    def __init__(self, live: Object, pods: list[Object], *, conflict: bool = False) -> None:
        self.live, self.pods, self.conflict = live, pods, conflict
        self.calls: list[str] = []
        self.written: list[Object] = []

    def get(self, kind: Kind, name: str, *, namespace: str | None = None) -> Object | None:
        self.calls.append(f"get {kind.plural}/{name}")
        return self.live

    def pages(self, kind: Kind, *, namespace: str | None = None) -> Iterator[Object]:
        self.calls.append(f"list {kind.plural} in {namespace}")
        yield {"items": self.pods[:1]}
        yield {"items": self.pods[1:]}

    def replace_status(self, kind: Kind, obj: Object) -> Object:
        self.calls.append(f"put {kind.plural}/status")
        if self.conflict:
            raise ApiException(status=409, reason="Conflict")
        self.written.append(obj)
        return obj


class RecordingEvents:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def record(self, tenant_name: str, reason: str, message: str, *, kind: str = "Normal") -> None:
        self.recorded.append((tenant_name, reason, message))


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def recount(
    cached: Object, kube: RecordingKube, indexed: int
) -> tuple[BackstopRecount, Clock, RecordingEvents]:
    cache = ObjectCache()
    cache.upsert(RESOURCE_QUOTA, cached)
    facts = {
        "u1": PodFacts(
            namespace="vision-a", name="p", phase="Running", gpus=GpuAmount(indexed), is_preemptible=False
        )
    }
    clock, events = Clock(), RecordingEvents()
    recount = BackstopRecount(
        cast(KubeApi, kube),
        cache,
        lambda namespaces: facts if namespaces == ["vision-a"] else {},
        events=cast(TenantEvents, events),
        quiet_seconds=10,
        clock=clock,
    )
    return recount, clock, events


def test_a_quiet_overcharge_is_given_back_from_a_fresh_list() -> None:
    kube = RecordingKube(quota("10"), [pod("2"), pod("2"), pod("2", phase="Succeeded"), pod("2")])
    sweeper, clock, events = recount(quota("10"), kube, indexed=6)
    sweeper.sweep()  # first seen: the quiet time starts
    clock.now += 9
    sweeper.sweep()
    assert kube.calls == [], "not before the status has been quiet for quiet_seconds"
    clock.now += 1
    sweeper.sweep()
    assert kube.calls == [
        "get resourcequotas/labgate-gpu",
        "list pods in vision-a",
        "put resourcequotas/status",
    ]
    assert [w["status"]["used"][QUOTA_KEY] for w in kube.written] == ["6"]
    assert [(t, r) for t, r, _ in events.recorded] == [("vision", "GpuBackstopRecounted")]
    assert "charged 10 GPUs; its pods hold 6" in events.recorded[0][2]


def test_a_charge_the_index_accounts_for_costs_no_request() -> None:
    kube = RecordingKube(quota("6"), [])
    sweeper, clock, _ = recount(quota("6"), kube, indexed=6)
    sweeper.sweep()
    clock.now += 60
    sweeper.sweep()
    assert kube.calls == []


def test_a_backstop_written_since_the_cache_read_is_left_for_the_next_quiet_time() -> None:
    kube = RecordingKube(quota("11", version="8"), [pod("2")])
    sweeper, clock, _ = recount(quota("10", version="7"), kube, indexed=2)
    sweeper.sweep()
    clock.now += 10
    sweeper.sweep()
    assert kube.calls == ["get resourcequotas/labgate-gpu"], "no list and no write over version 8"


def test_a_write_refused_for_a_newer_version_is_not_an_error() -> None:
    kube = RecordingKube(quota("10"), [pod("2")], conflict=True)
    sweeper, clock, events = recount(quota("10"), kube, indexed=2)
    sweeper.sweep()
    clock.now += 10
    sweeper.sweep()
    assert kube.calls[-1] == "put resourcequotas/status"
    assert events.recorded == []


def test_a_charge_the_list_confirms_is_not_listed_again_until_it_changes() -> None:
    # The index holds less (its weights, or a pod it has not seen yet); the API holds all 10.
    kube = RecordingKube(quota("10"), [pod("5"), pod("5")])
    sweeper, clock, _ = recount(quota("10"), kube, indexed=4)
    sweeper.sweep()
    clock.now += 10
    sweeper.sweep()
    clock.now += 60
    sweeper.sweep()
    assert kube.calls == ["get resourcequotas/labgate-gpu", "list pods in vision-a"]
    assert kube.written == []
