"""Lease-based leader election (coordination.k8s.io/v1), so that exactly one reconciler replica writes.

The holder renews every `lease_seconds / 3`. It counts as leader only until `2/3 * lease_seconds`
after its last successful renewal: a replica that cannot reach the API stops writing well before
another replica may take the lease (which needs the full lease duration to pass without renewal).

No decision compares two machines' clocks. As client-go does, a candidate judges the holder's lease
by when *it* last saw the lease record change (holder, renewTime or leaseTransitions), on its own
monotonic clock: the lease has expired once the record stayed the same for the lease duration. A
holder whose wall clock runs hours ahead or behind neither keeps the lease forever nor loses it early.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable

from labgate.core.api_resources import LEASE
from labgate.core.kube import ApiException, KubeApi

log = logging.getLogger(__name__)


def _micro_time(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        kube: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: float = 15.0,
        monotonic: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ):
        """`monotonic` judges durations (the lease's expiry, this replica's leadership); `wall_clock`
        only fills the Lease's timestamps for people to read. Both are injectable for tests."""
        self.kube = kube
        self._monotonic = monotonic
        self._wall_clock = wall_clock
        # The lease record as last seen, and when (on this replica's monotonic clock) it last changed.
        self._observed_record: tuple[object, ...] | None = None
        self._observed_at = 0.0
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self._valid_until = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self.on_elected: Callable[[], None] = lambda: None

    @property
    def is_leader(self) -> bool:
        return self._monotonic() < self._valid_until

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop renewing and hand the lease back so another replica takes over at once."""
        self._stop.set()
        self._thread.join(timeout=5)
        if self.is_leader:
            self._valid_until = 0.0
            try:
                lease = self.kube.get(LEASE, self.name, namespace=self.namespace)
                if lease and lease.get("spec", {}).get("holderIdentity") == self.identity:
                    lease["spec"]["holderIdentity"] = None
                    self.kube.replace(LEASE, lease)
            except ApiException as err:
                log.warning("could not release the lease: %s", err.reason)

    def _run(self) -> None:
        while not self._stop.is_set():
            renewed_at = self._monotonic()
            was_leader = self.is_leader
            try:
                if self._try_acquire_or_renew():
                    self._valid_until = renewed_at + self.lease_seconds * 2 / 3
                    if not was_leader:
                        log.info("%s became the leader", self.identity)
                        self.on_elected()
            except ApiException as err:
                log.warning("lease %s/%s: %s", self.namespace, self.name, err.reason)
            except Exception:
                log.exception("lease %s/%s: renewal failed", self.namespace, self.name)
            self._stop.wait(self.lease_seconds / 3)

    def _observe(self, spec: dict[str, object]) -> float:
        """Seconds since the lease record last changed, as this replica observed it."""
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        now = self._monotonic()
        if record != self._observed_record:
            self._observed_record = record
            self._observed_at = now
        return now - self._observed_at

    def _try_acquire_or_renew(self) -> bool:
        now = self._wall_clock()
        lease = self.kube.get(LEASE, self.name, namespace=self.namespace)
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_seconds)),
            "renewTime": _micro_time(now),
        }
        if lease is None:
            self.kube.create(
                LEASE,
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {**spec, "acquireTime": _micro_time(now), "leaseTransitions": 0},
                },
                namespace=self.namespace,
            )
            return True
        current = lease.get("spec", {})
        holder = current.get("holderIdentity")
        duration = float(current.get("leaseDurationSeconds") or self.lease_seconds)
        unchanged_for = self._observe(current)
        expired = current.get("renewTime") is None or unchanged_for > duration
        if holder and holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec["acquireTime"] = _micro_time(now)
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        lease["spec"] = {**current, **spec}
        try:
            # resourceVersion in `lease` makes this a compare-and-swap: two replicas cannot both win.
            self.kube.replace(LEASE, lease)
        except ApiException as err:
            if err.status == 409:
                return False
            raise
        return True
