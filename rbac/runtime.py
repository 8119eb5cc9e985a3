"""The controllers' runtime: the object cache the reflectors fill, work queues, leader-gated
workers and periodic tasks. It knows no resource: the controllers (tenant_controller.py,
settlement_controller.py) and the periodic tasks (cert rotation, resync, reservation sweep) plug in.

Only the leader writes. The gate (`LeaderGate`) is the one place that asks: workers and periodic
tasks run only while it is open, and a write checks it once more (`check`), so a replica that lost
the lease stops between two writes rather than after a whole reconcile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import Counter

from labgate.core.api_resources import Kind, Object
from labgate.core.errors import LabgateError
from labgate.core.kube import ApiException
from labgate.core.tenant import TENANT_LABEL
from rbac.desired import object_key

log = logging.getLogger(__name__)

# Every write of the reconciler is under this one field manager.
FIELD_MANAGER = "labgate-reconciler"
WRITES = Counter("labgate_reconcile_writes_total", "Writes made by the reconciler", ["verb"])

Key = tuple[str, str, str, str]


def labels(obj: Object) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("labels") or {})


class NotLeaderError(LabgateError, RuntimeError):
    """This replica lost (or never had) the lease: it must not write."""


class ObjectCache:
    """The last seen version of every object the reflectors follow, by (apiVersion, kind, ns, name),
    indexed by the tenant label, so that reconciling one tenant never scans everyone's objects."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[Key, Object] = {}
        self._by_tenant: dict[str, set[Key]] = {}

    @staticmethod
    def _key(kind: Kind, obj: Object) -> Key:
        return object_key({**obj, "apiVersion": kind.api_version, "kind": kind.kind})

    def _forget(self, key: Key) -> None:
        old = self._objects.pop(key, None)
        if old is not None and (tenant := labels(old).get(TENANT_LABEL)) is not None:
            keys = self._by_tenant.get(tenant)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_tenant[tenant]

    def _remember(self, key: Key, obj: Object) -> None:
        self._forget(key)
        self._objects[key] = obj
        if (tenant := labels(obj).get(TENANT_LABEL)) is not None:
            self._by_tenant.setdefault(tenant, set()).add(key)

    def replace_kind(self, kind: Kind, objects: list[Object]) -> None:
        with self._lock:
            for key in [k for k in self._objects if k[:2] == (kind.api_version, kind.kind)]:
                self._forget(key)
            for obj in objects:
                self._remember(self._key(kind, obj), obj)

    def upsert(self, kind: Kind, obj: Object) -> Object | None:
        """Remember `obj`; return the copy it replaced (None if it is new)."""
        key = self._key(kind, obj)
        with self._lock:
            old = self._objects.get(key)
            self._remember(key, obj)
            return old

    def remove(self, kind: Kind, obj: Object) -> None:
        with self._lock:
            self._forget(self._key(kind, obj))

    def get(self, key: Key) -> Object | None:
        with self._lock:
            return self._objects.get(key)

    def labelled_for(self, tenant: str) -> list[tuple[Key, Object]]:
        """Every cached object labelled labgate.io/tenant=<tenant> (namespaces included)."""
        with self._lock:
            return [(k, self._objects[k]) for k in self._by_tenant.get(tenant, ())]

    def tenants_named(self) -> set[str]:
        """Every tenant some cached object is labelled for (a Tenant deleted with its namespaces kept
        is among them: its kept NetworkPolicies and quotas carry its name)."""
        with self._lock:
            return set(self._by_tenant)

    def select(self, predicate: Callable[[Key, Object], bool]) -> list[tuple[Key, Object]]:
        with self._lock:
            return [(k, o) for k, o in self._objects.items() if predicate(k, o)]


class WorkQueue:
    """Tenant names to work on. A name queued twice is handled once, and never by two workers at
    once: queued again while in progress, it is handed out again after `done`.

    With `min_interval` (seconds), a name is handed out at most once per interval: queued again
    sooner, it waits out the rest of the interval, and everything queued meanwhile is one pass. A
    burst of a thousand pod events then costs a tenant a few passes (and their writes) rather than
    one each; the last one queued is always handed out, so the last state is always written. A name
    queued `at_once` skips the rest of its interval (never the wait for a pass in progress).

    With `busy_share` (0 to 1), a name's passes take at most that share of one CPU: after a pass
    that spent c seconds of CPU (`cpu_clock`, the worker thread's; the pass's waits on the API do
    not count), the name rests at least c * (1 / busy_share - 1) seconds from the pass's end, when
    that is longer than what is left of `min_interval`. A pass whose cost grows with the name's size
    (a tenant of 10,000 pods) then runs less often, instead of once per interval whatever it costs,
    which made a launch's total cost grow with the square of its pods."""

    def __init__(
        self,
        *,
        min_interval: float = 0.0,
        busy_share: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        if busy_share is not None and not 0 < busy_share <= 1:
            raise ValueError(f"busy_share must be within (0, 1], not {busy_share}")
        self.min_interval = min_interval
        self.busy_share = busy_share
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._started: dict[str, float] = {}  # name -> the CPU clock when its pass was handed out
        self._cond = threading.Condition()
        self._pending: dict[str, None] = {}  # insertion-ordered set
        self._active: set[str] = set()
        self._not_before: dict[str, float] = {}  # name -> when it may be handed out again
        self._at_once: set[str] = set()  # queued names that skip the rest of their interval

    def add(self, name: str, *, at_once: bool = False) -> None:
        """Queue `name`; `at_once`: hand it out as soon as no pass of it is in progress."""
        with self._cond:
            # A worker may be waiting out this name's interval: wake one when it need not any more.
            is_sooner = at_once and name not in self._at_once
            if at_once:
                self._at_once.add(name)
            if name in self._pending and not is_sooner:
                return  # a worker was woken when it was queued: a burst of events wakes none again
            self._pending[name] = None
            self._cond.notify()

    def get(self, timeout: float) -> str | None:
        """The next name that is neither in progress nor within its interval; None after `timeout`."""
        with self._cond:
            deadline = self._clock() + timeout
            while True:
                now = self._clock()
                wait = deadline - now
                for name in self._pending:
                    if name in self._active:
                        continue
                    ready_at = now if name in self._at_once else self._not_before.get(name, now)
                    if ready_at <= now:
                        return self._hand_out(name, now)
                    wait = min(wait, ready_at - now)
                if wait <= 0:
                    return None
                self._cond.wait(wait)

    def _hand_out(self, name: str, now: float) -> str:
        del self._pending[name]
        self._at_once.discard(name)
        self._active.add(name)
        self._started[name] = self._cpu_clock()
        # Names whose interval is over need no entry (a tenant that went away leaves none).
        for done in [n for n, at in self._not_before.items() if at <= now]:
            del self._not_before[done]
        if self.min_interval > 0:
            self._not_before[name] = now + self.min_interval
        return name

    def done(self, name: str) -> None:
        with self._cond:
            self._active.discard(name)
            started = self._started.pop(name, None)
            if self.busy_share is not None and started is not None:
                now = self._clock()
                rest_until = now + (self._cpu_clock() - started) * (1 / self.busy_share - 1)
                if rest_until > self._not_before.get(name, now):
                    self._not_before[name] = rest_until
            self._cond.notify_all()

    def __len__(self) -> int:
        """Names waiting (within their interval, too) or in progress."""
        with self._cond:
            return len(self._pending) + len(self._active)


class LeaderGate:
    """Open while this replica holds the lease and its caches are synced: the one leader check."""

    def __init__(self, *, is_leader: Callable[[], bool], is_synced: Callable[[], bool]):
        self._is_leader = is_leader
        self._is_synced = is_synced

    @property
    def is_leader(self) -> bool:
        return self._is_leader()

    @property
    def is_open(self) -> bool:
        return self._is_synced() and self._is_leader()

    def check(self) -> None:
        """Raise NotLeaderError unless this replica may write now (call right before each write)."""
        if not self._is_leader():
            raise NotLeaderError


class Workers:
    """Threads that hand a queue's names to `handle`, only while the gate is open. A failed name is
    queued again after a pause; a lost lease drops it (the next leader reconciles everything)."""

    def __init__(
        self,
        name: str,
        queue: WorkQueue,
        handle: Callable[[str], None],
        *,
        gate: LeaderGate,
        stop: threading.Event,
        count: int,
        on_lost_lease: Callable[[], None] = lambda: None,
    ):
        self.name = name
        self.queue = queue
        self._handle = handle
        self._gate = gate
        self._stop = stop
        self._on_lost_lease = on_lost_lease
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-worker-{i}", daemon=True) for i in range(count)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self, timeout: float) -> None:
        for thread in self._threads:
            thread.join(timeout=timeout)

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._gate.is_open:
                self._stop.wait(0.1)
                continue
            name = self.queue.get(timeout=0.5)
            if name is not None:
                try:
                    self._work_on(name)
                finally:
                    self.queue.done(name)

    def _work_on(self, name: str) -> None:
        try:
            self._handle(name)
        except NotLeaderError:
            log.warning("lost the lease while %s %s; another replica takes over", self.name, name)
            self._on_lost_lease()
        except ApiException as err:
            log.warning("%s %s failed (%s %s); retrying", self.name, name, err.status, err.reason)
            self._stop.wait(0.5)
            self.queue.add(name)
        except Exception:
            log.exception("%s %s failed; retrying", self.name, name)
            self._stop.wait(1.0)
            self.queue.add(name)


@dataclass
class PeriodicTask:
    """`action` every `every_seconds` while this replica leads; the first run `first_after` seconds
    after the start (0: at once)."""

    name: str
    every_seconds: float
    action: Callable[[], None]
    first_after: float = 0.0
    due: float = 0.0


class PeriodicTasks:
    """One thread that runs each task when it is due, while this replica holds the lease. A task
    that fails is logged and tried again at its next turn."""

    def __init__(self, tasks: list[PeriodicTask], *, gate: LeaderGate, stop: threading.Event):
        self.tasks = tasks
        self._gate = gate
        self._stop = stop
        self._thread = threading.Thread(target=self._run, name="periodic-tasks", daemon=True)

    def start(self) -> None:
        started = time.monotonic()
        for task in self.tasks:
            task.due = started + task.first_after
        self._thread.start()

    def join(self, timeout: float) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout=timeout)

    def run_due(self, now: float) -> None:
        """Run the tasks due at `now` (while leader), and schedule their next turn."""
        for task in self.tasks:
            if now < task.due:
                continue
            task.due = now + task.every_seconds
            if not self._gate.is_leader:
                continue
            try:
                task.action()
            except Exception:
                log.exception("periodic task %s failed; trying again in %ss", task.name, task.every_seconds)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_due(time.monotonic())
            next_due = min((t.due for t in self.tasks), default=time.monotonic() + 1.0)
            self._stop.wait(min(1.0, max(0.05, next_due - time.monotonic())))
