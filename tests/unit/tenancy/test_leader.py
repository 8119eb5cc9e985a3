"""Leader election judged by observed change, not by comparing two machines' clocks."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from labgate.core.api_resources import Kind
from labgate.core.kube import ApiException, KubeApi
from rbac.leader import LeaderElector
from tests.manual_clock import ManualClock


class FakeLeases:
    """The part of KubeApi the elector uses, with the apiserver's compare-and-swap on resourceVersion."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0

    def get(self, kind: Kind, name: str, *, namespace: str | None = None, timeout: float = 10) -> Any:
        return copy.deepcopy(self.lease)

    def create(self, kind: Kind, obj: dict[str, Any], *, namespace: str | None = None) -> Any:
        if self.lease is not None:
            raise ApiException(status=409, reason="AlreadyExists")
        self.version += 1
        self.lease = copy.deepcopy(obj)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)

    def replace(self, kind: Kind, obj: dict[str, Any]) -> Any:
        assert self.lease is not None
        if obj["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        self.version += 1
        self.lease = copy.deepcopy(obj)
        self.lease["metadata"]["resourceVersion"] = str(self.version)
        return copy.deepcopy(self.lease)


def elector(
    leases: FakeLeases, identity: str, monotonic: ManualClock, wall_offset_hours: float
) -> LeaderElector:
    base = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)

    def wall() -> dt.datetime:  # this machine's wall clock: skewed by the offset, ticking with monotonic
        return base + dt.timedelta(hours=wall_offset_hours, seconds=monotonic.now)

    kube: KubeApi = leases  # type: ignore[assignment]  # a fake of the calls the elector makes
    return LeaderElector(
        kube,
        namespace="labgate-system",
        name="labgate-reconciler",
        identity=identity,
        lease_seconds=15,
        monotonic=monotonic,
        wall_clock=wall,
    )


@pytest.mark.parametrize("holder_skew_hours", [-5.0, 5.0])
def test_a_live_holder_keeps_the_lease_whatever_its_clock_says(holder_skew_hours: float) -> None:
    leases, clock = FakeLeases(), ManualClock(1000.0)
    holder = elector(leases, "a", clock, holder_skew_hours)
    candidate = elector(leases, "b", clock, 0.0)
    assert holder._try_acquire_or_renew()
    for _ in range(20):  # a minute of renewals every 5 s, the candidate trying in between
        clock.now += 5
        assert not candidate._try_acquire_or_renew()
        assert holder._try_acquire_or_renew()
    assert leases.lease is not None
    assert leases.lease["spec"]["holderIdentity"] == "a"


@pytest.mark.parametrize("holder_skew_hours", [-5.0, 5.0])
def test_a_dead_holder_loses_the_lease_after_one_duration_whatever_its_clock_said(
    holder_skew_hours: float,
) -> None:
    leases, clock = FakeLeases(), ManualClock(1000.0)
    holder = elector(leases, "a", clock, holder_skew_hours)
    candidate = elector(leases, "b", clock, 0.0)
    assert holder._try_acquire_or_renew()
    assert not candidate._try_acquire_or_renew()  # first sight of the record: the clock starts now
    clock.now += 14
    assert not candidate._try_acquire_or_renew(), "taken before the lease duration passed unrenewed"
    clock.now += 2
    assert candidate._try_acquire_or_renew(), "not taken after the lease duration passed unrenewed"
    assert leases.lease is not None
    assert leases.lease["spec"]["holderIdentity"] == "b"
    assert leases.lease["spec"]["leaseTransitions"] == 1


def test_two_candidates_never_both_win_one_expired_lease() -> None:
    leases, clock = FakeLeases(), ManualClock(1000.0)
    assert elector(leases, "a", clock, 0.0)._try_acquire_or_renew()
    b, c = elector(leases, "b", clock, 1.0), elector(leases, "c", clock, -1.0)
    assert not b._try_acquire_or_renew()
    assert not c._try_acquire_or_renew()
    clock.now += 16
    # Both read the same expired record; the apiserver's compare-and-swap lets one write win.
    stale = copy.deepcopy(leases.lease)
    real_get = leases.get
    leases.get = lambda *a, **k: copy.deepcopy(stale)  # type: ignore[method-assign]
    results = [b._try_acquire_or_renew(), c._try_acquire_or_renew()]
    leases.get = real_get  # type: ignore[method-assign]
    assert sorted(results) == [False, True]
