"""The controllers' runtime: the object cache, the leader gate and the periodic tasks."""

from __future__ import annotations

import itertools
import threading

import pytest

from labgate.core.api_resources import NAMESPACE, ROLE_BINDING
from rbac.cert_rotation import rotation_task
from rbac.runtime import LeaderGate, NotLeaderError, ObjectCache, PeriodicTask, PeriodicTasks, WorkQueue
from tests.manual_clock import ManualClock


def test_object_cache_indexes_by_tenant_and_follows_relabels() -> None:
    cache = ObjectCache()
    binding = {"metadata": {"name": "b", "namespace": "vision", "labels": {"labgate.io/tenant": "vision"}}}
    cache.replace_kind(ROLE_BINDING, [binding])
    cache.upsert(NAMESPACE, {"metadata": {"name": "vision", "labels": {"labgate.io/tenant": "vision"}}})
    assert sorted(k[1] for k, _ in cache.labelled_for("vision")) == ["Namespace", "RoleBinding"]
    cache.upsert(NAMESPACE, {"metadata": {"name": "vision", "labels": {"labgate.io/tenant": "audio"}}})
    assert [k[1] for k, _ in cache.labelled_for("vision")] == ["RoleBinding"]
    assert [k[3] for k, _ in cache.labelled_for("audio")] == ["vision"]
    cache.remove(ROLE_BINDING, binding)
    assert cache.labelled_for("vision") == []


def test_a_name_queued_twice_is_handed_out_once_and_never_to_two_workers() -> None:
    queue = WorkQueue()
    queue.add("vision")
    queue.add("vision")
    assert queue.get(timeout=0) == "vision"
    queue.add("vision")  # queued again while in progress: held until done
    assert queue.get(timeout=0) is None
    queue.done("vision")
    assert queue.get(timeout=0) == "vision"


def test_with_an_interval_a_burst_of_adds_is_a_few_passes_and_the_last_add_is_handed_out() -> None:
    """100 adds over 5 s with a 1 s interval: at most one pass a second, and one after the last add."""
    clock = ManualClock()
    queue = WorkQueue(min_interval=1.0, clock=clock)
    handed: list[float] = []
    for i in range(100):
        clock.now = i * 0.05
        queue.add("vision")
        if (name := queue.get(timeout=0)) is not None:
            handed.append(clock.now)
            queue.done(name)
    assert len(handed) == 5  # at 0, 1, 2, 3, 4 s: not one per add
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(handed))
    assert queue.get(timeout=0) is None
    assert len(queue) == 1
    clock.now = 5.0
    assert queue.get(timeout=0) == "vision"  # the last state is always handled
    queue.done("vision")
    assert len(queue) == 0


def test_an_interval_holds_back_only_its_own_name() -> None:
    clock = ManualClock()
    queue = WorkQueue(min_interval=1.0, clock=clock)
    queue.add("vision")
    assert queue.get(timeout=0) == "vision"
    queue.done("vision")
    queue.add("vision")
    queue.add("audio")
    assert queue.get(timeout=0) == "audio"
    assert queue.get(timeout=0) is None


def test_a_name_queued_at_once_skips_its_interval_but_never_waits_less_for_a_pass_in_progress() -> None:
    clock = ManualClock()
    queue = WorkQueue(min_interval=1.0, clock=clock)
    queue.add("vision")
    assert queue.get(timeout=0) == "vision"
    queue.add("vision", at_once=True)  # while in progress: held until done
    assert queue.get(timeout=0) is None
    queue.done("vision")
    assert queue.get(timeout=0) == "vision"  # within its interval, handed out at once
    queue.done("vision")
    queue.add("vision")  # an ordinary add waits out the interval again
    assert queue.get(timeout=0) is None
    clock.now = 1.0
    assert queue.get(timeout=0) == "vision"


def test_with_a_busy_share_a_costly_pass_rests_in_proportion_and_a_cheap_one_keeps_the_interval() -> None:
    """A share of 0.2: a pass that spent 0.5 s of CPU rests 2 s from its end (the interval of 1 s no
    longer decides); one that spent 62.5 ms rests 0.25 s, within the interval, which decides."""
    clock, cpu = ManualClock(), ManualClock()
    queue = WorkQueue(min_interval=1.0, busy_share=0.2, clock=clock, cpu_clock=cpu)
    queue.add("vision")
    assert queue.get(timeout=0) == "vision"
    cpu.now, clock.now = 0.5, 0.75  # the pass spent 0.5 s of CPU and 0.25 s waiting on the API
    queue.done("vision")
    queue.add("vision")
    clock.now = 2.74
    assert queue.get(timeout=0) is None
    clock.now = 2.75
    assert queue.get(timeout=0) == "vision"
    cpu.now, clock.now = 0.5625, 2.875
    queue.done("vision")
    queue.add("vision")
    clock.now = 3.74
    assert queue.get(timeout=0) is None  # the interval from the hand-out decides
    clock.now = 3.75
    assert queue.get(timeout=0) == "vision"


def test_a_busy_share_holds_back_only_its_own_name_and_yields_to_at_once() -> None:
    clock, cpu = ManualClock(), ManualClock()
    queue = WorkQueue(busy_share=0.1, clock=clock, cpu_clock=cpu)
    queue.add("vision")
    assert queue.get(timeout=0) == "vision"
    cpu.now = 1.0  # a pass of 1 s of CPU: 9 s of rest
    queue.done("vision")
    queue.add("vision")
    queue.add("audio")
    assert queue.get(timeout=0) == "audio"
    queue.done("audio")
    assert queue.get(timeout=0) is None
    queue.add("vision", at_once=True)  # a pod gone before it was settled: at once, whatever the rest
    assert queue.get(timeout=0) == "vision"


@pytest.mark.parametrize("share", [0.0, -0.1, 1.5])
def test_a_busy_share_outside_zero_to_one_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="busy_share"):
        WorkQueue(busy_share=share)


class WaitSeen(threading.Condition):
    def __init__(self) -> None:
        super().__init__()
        self.is_waiting = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.is_waiting.set()
        return super().wait(timeout)


def test_a_name_queued_at_once_wakes_a_worker_waiting_out_its_interval() -> None:
    queue = WorkQueue(min_interval=60.0)
    queue.add("vision")
    assert queue.get(timeout=0) == "vision"
    queue.done("vision")
    queue.add("vision")
    waiting = WaitSeen()
    queue._cond = waiting  # the queue's one lock and condition, watched
    handed: list[str | None] = []
    worker = threading.Thread(target=lambda: handed.append(queue.get(timeout=30.0)))
    worker.start()
    assert waiting.is_waiting.wait(timeout=10.0)  # the worker waits out the interval
    queue.add("vision", at_once=True)
    worker.join(timeout=10.0)
    assert handed == ["vision"]


class Leadership:
    def __init__(self) -> None:
        self.is_leader = False

    def __call__(self) -> bool:
        return self.is_leader


def test_the_gate_opens_only_for_a_synced_leader_and_a_write_checks_it() -> None:
    leader, synced = Leadership(), Leadership()
    gate = LeaderGate(is_leader=leader, is_synced=synced)
    with pytest.raises(NotLeaderError):
        gate.check()
    leader.is_leader = True
    gate.check()
    assert not gate.is_open
    synced.is_leader = True
    assert gate.is_open


def test_periodic_tasks_run_when_due_and_only_while_leader() -> None:
    leader = Leadership()
    runs: list[str] = []
    tasks = [
        PeriodicTask("resync", 300.0, lambda: runs.append("resync"), first_after=300.0),
        PeriodicTask("sweep", 2.0, lambda: runs.append("sweep"), first_after=2.0),
    ]
    periodic = PeriodicTasks(
        tasks, gate=LeaderGate(is_leader=leader, is_synced=lambda: True), stop=threading.Event()
    )
    for task in tasks:
        task.due = task.first_after
    periodic.run_due(2.0)  # due, but not the leader: skipped, and its next turn scheduled
    assert runs == []
    leader.is_leader = True
    periodic.run_due(3.0)
    assert runs == []
    periodic.run_due(4.0)
    periodic.run_due(300.0)
    assert runs == ["sweep", "resync", "sweep"]


def test_a_failing_task_is_tried_again_at_its_next_turn() -> None:
    calls: list[float] = []

    def broken() -> None:
        calls.append(1.0)
        raise RuntimeError("boom")

    task = PeriodicTask("broken", 5.0, broken)
    periodic = PeriodicTasks(
        [task], gate=LeaderGate(is_leader=lambda: True, is_synced=lambda: True), stop=threading.Event()
    )
    periodic.run_due(0.0)
    periodic.run_due(5.0)
    assert len(calls) == 2


class Certificates:
    def __init__(self) -> None:
        self.steps = 0

    def step(self) -> str:
        self.steps += 1
        return "none"


def test_certificate_rotation_is_a_periodic_task_of_its_own_that_starts_at_once() -> None:
    manager = Certificates()
    task = rotation_task(manager, every_seconds=30.0)  # type: ignore[arg-type]  # a fake of .step()
    assert (task.name, task.every_seconds, task.first_after) == ("certificate-rotation", 30.0, 0.0)
    leader = Leadership()
    periodic = PeriodicTasks(
        [task], gate=LeaderGate(is_leader=leader, is_synced=lambda: True), stop=threading.Event()
    )
    periodic.run_due(0.0)
    assert manager.steps == 0  # a follower never rotates
    leader.is_leader = True
    periodic.run_due(30.0)
    periodic.run_due(45.0)
    assert manager.steps == 1


class CountingCondition(threading.Condition):
    def __init__(self) -> None:
        super().__init__()
        self.notified = 0

    def notify(self, n: int = 1) -> None:
        self.notified += 1
        super().notify(n)


def test_a_burst_of_adds_of_a_queued_name_wakes_a_worker_once() -> None:
    """Issue 21: every pod event woke a settlement worker to find its tenant already queued."""
    queue = WorkQueue(min_interval=1.0)
    counting = CountingCondition()
    queue._cond = counting  # the queue's one lock and condition, counted
    for _ in range(100):
        queue.add("vision")
    queue.add("audio")
    assert counting.notified == 2
    assert {queue.get(timeout=0), queue.get(timeout=0)} == {"vision", "audio"}
