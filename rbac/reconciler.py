"""The tenant reconciler: watches Tenants, Namespaces and everything labgate manages, and makes the
cluster match rbac.desired, with server-side apply under one field manager.

- Watches, not polling: a change to a Tenant or a managed object enqueues that tenant; a periodic
  resync (default every 5 minutes) catches anything missed and makes no writes when nothing drifted.
- Only the leader writes (a coordination.k8s.io Lease); followers keep their caches warm and take
  over when the lease expires. A leader that cannot renew stops writing before its lease runs out.
- Deleting a Tenant runs its finalizer: labgate's objects go; namespaces stay unless
  spec.namespaces.keepOnDelete is false (they hold data), keeping their tenant label so the admission
  policies refuse new work there until the infra team reassigns or deletes them.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from labgate.core.errors import LabgateError
from labgate.core.kinds import (
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    EVENT,
    LIMIT_RANGE,
    NAMESPACE,
    NETWORK_POLICY,
    RESOURCE_QUOTA,
    ROLE_BINDING,
    SERVICE_ACCOUNT,
    TENANT,
    Kind,
    Object,
    kind_of,
)
from labgate.core.kube import ApiClient, ApiException, KubeApi, Reflector
from labgate.core.metrics import GPU_LIMIT, GPU_USED
from labgate.core.tenant import FINALIZER, MANAGED_BY, MANAGED_BY_LABEL, TENANT_LABEL, Tenant
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.ledger import (
    FINISHED_PHASES,
    GpuAmount,
    Ledger,
    LedgerConflictError,
    LedgerCorruptError,
    reservation_uid,
    settle,
    usage,
)
from labgate.gpu_accounting.ledger import now as ledger_now
from labgate.gpu_accounting.ledger_store import LedgerCache, LedgerStore
from labgate.gpu_accounting.pod_gpus import is_admitted_preemptible, pod_gpus
from labgate.gpu_accounting.settled_pods import SettledPods
from rbac.cert_rotation import CertificateManager
from rbac.desired import (
    Manifest,
    desired_objects,
    is_subset,
    object_key,
    shared_cluster_roles,
    shared_priority_classes,
    tenant_namespaces,
)
from rbac.leader import LeaderElector
from rbac.tenant_view import gpu_summary, pending_pods

log = logging.getLogger("labgate.reconciler")

FIELD_MANAGER = "labgate-reconciler"
MANAGED_KINDS = (
    ROLE_BINDING,
    SERVICE_ACCOUNT,
    RESOURCE_QUOTA,
    LIMIT_RANGE,
    NETWORK_POLICY,
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
)

# Tenants holding reservations are looked at this often, so that one whose pod never came is released
# within seconds of its expiry.
LEDGER_SWEEP_SECONDS = 2.0
# How long the uids of deleted pods are remembered (a late reservation of one is released at once).
GONE_MEMORY_SECONDS = 300.0
POD = Kind("Pod", "", "v1", "pods", is_namespaced=True)

REPAIRS = Counter("labgate_reconcile_repairs_total", "Managed objects restored after drift", ["kind"])
WRITES = Counter("labgate_reconcile_writes_total", "Writes made by the reconciler", ["verb"])
RECOUNTED = Counter(
    "labgate_gpu_pods_recounted_total",
    "Live GPU pods with neither a settled record nor a reservation, recorded from their specs",
    ["tenant"],
)


@dataclass(frozen=True)
class PodFacts:
    """What the reconciler keeps of one pod (by uid): where it is, its phase, the GPUs its spec asks."""

    namespace: str
    name: str
    phase: str
    gpus: GpuAmount
    is_preemptible: bool


Key = tuple[str, str, str, str]


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
        if old is not None and (tenant := _labels(old).get(TENANT_LABEL)) is not None:
            keys = self._by_tenant.get(tenant)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_tenant[tenant]

    def _remember(self, key: Key, obj: Object) -> None:
        self._forget(key)
        self._objects[key] = obj
        if (tenant := _labels(obj).get(TENANT_LABEL)) is not None:
            self._by_tenant.setdefault(tenant, set()).add(key)

    def replace_kind(self, kind: Kind, objects: list[Object]) -> None:
        with self._lock:
            for key in [k for k in self._objects if k[:2] == (kind.api_version, kind.kind)]:
                self._forget(key)
            for obj in objects:
                self._remember(self._key(kind, obj), obj)

    def upsert(self, kind: Kind, obj: Object) -> None:
        with self._lock:
            self._remember(self._key(kind, obj), obj)

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

    def select(self, predicate: Callable[[Key, Object], bool]) -> list[tuple[Key, Object]]:
        with self._lock:
            return [(k, o) for k, o in self._objects.items() if predicate(k, o)]


class WorkQueue:
    """Tenant names to reconcile. A name queued twice is reconciled once, and never by two workers at
    once: queued again while in progress, it is handed out again after `done`."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._pending: dict[str, None] = {}  # insertion-ordered set
        self._active: set[str] = set()

    def add(self, name: str) -> None:
        with self._cond:
            self._pending[name] = None
            self._cond.notify()

    def get(self, timeout: float) -> str | None:
        with self._cond:
            for _ in range(2):
                for name in self._pending:
                    if name not in self._active:
                        del self._pending[name]
                        self._active.add(name)
                        return name
                self._cond.wait(timeout)
            return None

    def done(self, name: str) -> None:
        with self._cond:
            self._active.discard(name)
            self._cond.notify_all()

    def __len__(self) -> int:
        """Names waiting or in progress."""
        with self._cond:
            return len(self._pending) + len(self._active)


def _labels(obj: Object) -> dict[str, str]:
    return dict(obj.get("metadata", {}).get("labels") or {})


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def finalizer_added(live: Object) -> list[dict[str, Any]]:
    """A JSON Patch that adds labgate's finalizer only if the Tenant's finalizers are still what this
    replica read: a `test` op guards the write, so a concurrent change by anyone else fails it
    (the next pass re-reads) instead of being overwritten by a stale list."""
    metadata = live.get("metadata", {})
    current = list(metadata.get("finalizers") or [])
    if current:
        return [
            {"op": "test", "path": "/metadata/finalizers", "value": current},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ]
    # No list yet: nothing to test a list against, so test the object's version instead.
    return [
        {"op": "test", "path": "/metadata/resourceVersion", "value": metadata.get("resourceVersion")},
        {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
    ]


def finalizer_removed(finalizers: tuple[str, ...]) -> list[dict[str, Any]]:
    """A JSON Patch that removes exactly labgate's finalizer, tested at the index it was read at."""
    index = finalizers.index(FINALIZER)
    path = f"/metadata/finalizers/{index}"
    return [{"op": "test", "path": path, "value": FINALIZER}, {"op": "remove", "path": path}]


class Reconciler:
    """Watch-driven reconciler for every Tenant."""

    def __init__(
        self,
        api: ApiClient,
        *,
        namespace: str,
        identity: str,
        lease_seconds: float = 15.0,
        resync_seconds: float = 300.0,
        workers: int = 2,
        certificates: CertificateManager | None = None,
        certificate_check_seconds: float = 30.0,
        gpu_counting: GpuCounting | None = None,
    ):
        self.kube = KubeApi(api, field_manager=FIELD_MANAGER)
        self.gpu_counting = gpu_counting or GpuCounting()
        self.cache = ObjectCache()
        self.queue = WorkQueue()
        self.leader = LeaderElector(
            KubeApi(
                api, field_manager=FIELD_MANAGER
            ),  # its own counters: lease renewals are not reconcile writes
            namespace=namespace,
            name="labgate-reconciler",
            identity=identity,
            lease_seconds=lease_seconds,
        )
        self.leader.on_elected = self._on_elected
        self.resync_seconds = resync_seconds
        self.certificates = certificates
        self.certificate_check_seconds = certificate_check_seconds
        self._stop = threading.Event()
        self._reflectors = [
            self._reflector(TENANT, None),
            self._reflector(NAMESPACE, None),
            *[self._reflector(kind, f"{MANAGED_BY_LABEL}={MANAGED_BY}") for kind in MANAGED_KINDS],
        ]
        # Pods by uid, and the uids in each namespace.
        self._pods: dict[str, PodFacts] = {}
        self._pods_by_namespace: dict[str, set[str]] = {}
        # uid -> when the pod was seen gone: its reservation, if not yet settled, is released at once.
        self._gone_pod_uids: dict[str, float] = {}
        self._pods_lock = threading.Lock()
        self._reflectors.append(
            Reflector(
                "pods", self.kube.api, self.kube.lister(POD), on_list=self._on_pod_list, on_event=self._on_pod
            )
        )
        self.ledgers = LedgerCache(
            LedgerStore(KubeApi(api, field_manager=FIELD_MANAGER), namespace=namespace),
            on_unsettled=self.queue.add,
        )
        self.settled = SettledPods(
            KubeApi(api, field_manager=FIELD_MANAGER), namespace=namespace, on_deleted=self.queue.add
        )
        self._workers = [
            threading.Thread(target=self._work, args=(i,), name=f"reconcile-worker-{i}", daemon=True)
            for i in range(workers)
        ]
        self._shared_lock = threading.Lock()
        self._shared_applied = False
        self.reconciled = 0  # tenants reconciled since start (for benchmarks and tests)

    # -- wiring -----------------------------------------------------------------------------------

    def _tenant_of(self, kind: Kind, obj: Object) -> str | None:
        if kind is TENANT:
            return str(obj["metadata"]["name"])
        return _labels(obj).get(TENANT_LABEL)

    def _reflector(self, kind: Kind, label_selector: str | None) -> Reflector:
        def on_list(objects: list[Object]) -> None:
            self.cache.replace_kind(kind, objects)
            for obj in objects:
                if (name := self._tenant_of(kind, obj)) is not None:
                    self.queue.add(name)

        def on_event(event: str, obj: Object) -> None:
            if event == "DELETED":
                self.cache.remove(kind, obj)
            else:
                self.cache.upsert(kind, obj)
            if (name := self._tenant_of(kind, obj)) is not None:
                self.queue.add(name)

        return Reflector(
            kind.plural,
            self.kube.api,
            self.kube.lister(kind, label_selector=label_selector),
            on_list=on_list,
            on_event=on_event,
        )

    # -- pods and the GPU ledger -------------------------------------------------------------------

    def _tenant_of_namespace(self, namespace: str) -> str | None:
        return _labels(self.cache.get(("v1", "Namespace", "", namespace)) or {}).get(TENANT_LABEL)

    def _pod_facts(self, obj: Object) -> PodFacts:
        metadata = obj["metadata"]
        return PodFacts(
            namespace=str(metadata["namespace"]),
            name=str(metadata["name"]),
            phase=str((obj.get("status") or {}).get("phase", "")),
            gpus=pod_gpus(obj, self.gpu_counting),
            is_preemptible=is_admitted_preemptible(obj),
        )

    def _on_pod_list(self, objects: list[Object]) -> None:
        pods = {str(o["metadata"].get("uid", "")): self._pod_facts(o) for o in objects}
        by_namespace: dict[str, set[str]] = {}
        for uid, facts in pods.items():
            by_namespace.setdefault(facts.namespace, set()).add(uid)
        with self._pods_lock:
            for uid in set(self._pods) - set(pods):  # deleted while the watch was down
                self._gone_pod_uids[uid] = time.monotonic()
            self._pods, self._pods_by_namespace = pods, by_namespace
        for tenant in {self._tenant_of_namespace(ns) for ns in by_namespace}:
            if tenant:
                self.queue.add(tenant)

    def _on_pod(self, event: str, obj: Object) -> None:
        metadata = obj["metadata"]
        uid = str(metadata.get("uid", ""))
        namespace = str(metadata["namespace"])
        tenant = self._tenant_of_namespace(namespace)
        facts = None if event == "DELETED" else self._pod_facts(obj)
        with self._pods_lock:
            if facts is None:
                self._pods.pop(uid, None)
                self._pods_by_namespace.get(namespace, set()).discard(uid)
                if tenant is not None:  # only tenants' pods have reservations
                    self._gone_pod_uids[uid] = time.monotonic()
            else:
                self._pods[uid] = facts
                self._pods_by_namespace.setdefault(namespace, set()).add(uid)
        if tenant is not None:
            self.queue.add(tenant)

    def _recently_gone_pod_uids(self) -> frozenset[str]:
        """Uids of pods seen deleted recently (older ones no longer matter: a reservation whose pod
        never showed up has expired by then). Call with the pods lock held."""
        horizon = time.monotonic() - GONE_MEMORY_SECONDS
        for uid in [u for u, seen in self._gone_pod_uids.items() if seen < horizon]:
            del self._gone_pod_uids[uid]
        return frozenset(self._gone_pod_uids)

    def _maintain_ledger(self, tenant: str) -> GpuAmount | None:
        """Settle, release and expire the tenant's GPU reservations; return what it now uses.

        Settled pods are written first, the ledger second: a pod is never in neither (a crash in
        between counts it twice until the next pass, which is the safe way to be wrong). A ledger
        that does not parse is left for a person to repair (None: usage unknown)."""
        try:
            return self._settle(tenant)
        except LedgerCorruptError as err:
            log.error("%s; not maintaining it until it is repaired", err)
            return None

    def _expired_pods_still_there(self, ledger: Ledger, phases: dict[str, str]) -> dict[str, str]:
        """Phases of the pods of expired reservations that the pod watch has not shown, read from the
        API: the watch may lag, and a reservation must never be dropped while its pod exists."""
        found: dict[str, str] = {}
        now = ledger_now()
        for key, reservation in ledger.reservations.items():
            uid = reservation_uid(key, reservation)
            if uid in phases or reservation.expires > now or "/" not in reservation.pod:
                continue
            namespace, name = reservation.pod.split("/", 1)
            live = self.kube.get(POD, name, namespace=namespace)
            if live is not None and live.get("metadata", {}).get("uid") == uid:
                found[uid] = str((live.get("status") or {}).get("phase", ""))
        return found

    def _unrecorded(
        self, tenant: str, ledger: Ledger, settled_pods: dict[str, GpuAmount]
    ) -> dict[str, GpuAmount]:
        """The tenant's live GPU pods with neither a settled record nor a reservation, counted from
        their specs. (A pod seen before the ledger write that reserved it is counted twice for an
        instant at most: the ledger's compare-and-swap makes the next pass see the reservation.)"""
        reserved = {reservation_uid(k, r) for k, r in ledger.reservations.items()}
        found: dict[str, GpuAmount] = {}
        namespaces = self._labelled_namespaces(tenant)
        with self._pods_lock:
            for namespace in namespaces:
                for uid in self._pods_by_namespace.get(namespace, ()):
                    facts = self._pods.get(uid)
                    if (
                        facts is not None
                        and facts.gpus.total > 0
                        and not facts.is_preemptible
                        and uid not in settled_pods
                        and uid not in reserved
                    ):
                        found[uid] = facts.gpus
        return found

    def _settle(self, tenant: str) -> GpuAmount:
        ledger = self.ledgers.cached(tenant)
        for _ in range(5):
            self.settled.ensure_at_least(tenant, ledger.settled_versions)
            settled_pods = self.settled.pods(tenant)
            with self._pods_lock:
                phases = {
                    uid: self._pods[uid].phase
                    for uid in (
                        *(reservation_uid(k, r) for k, r in ledger.reservations.items()),
                        *settled_pods,
                    )
                    if uid in self._pods
                }
                gone = self._recently_gone_pod_uids()
            phases.update(self._expired_pods_still_there(ledger, phases))
            unrecorded = self._unrecorded(tenant, ledger, settled_pods)
            with self._pods_lock:
                phases.update({uid: self._pods[uid].phase for uid in unrecorded if uid in self._pods})
            updated, settled = settle(
                ledger,
                settled_pods,
                pod_phases=phases,
                now=ledger_now(),
                gone_pod_uids=gone,
                unrecorded=unrecorded,
            )
            try:
                if settled != settled_pods:
                    self._check_leader()
                    versions = self.settled.write(tenant, settled)  # a lost compare-and-swap re-reads
                    WRITES.labels("ledger").inc()
                    updated = updated.model_copy(update={"settled_versions": versions})
                    recounted = [u for u in unrecorded if u in settled]
                    if recounted := self._truly_unreserved(tenant, recounted):
                        self._report_recount(tenant, recounted, unrecorded)
                if updated == ledger:
                    return usage(ledger)
                self._check_leader()
                self.ledgers.write(updated)
                WRITES.labels("ledger").inc()
                return usage(updated)
            except LedgerConflictError:
                ledger = self.ledgers.fresh(tenant)
        return usage(ledger)

    def _truly_unreserved(self, tenant: str, uids: list[str]) -> list[str]:
        """The pods among `uids` that the ledger, read afresh, holds no reservation for: a repair to
        report. (A pod seen an instant before its reservation reached this replica's cache is not.)"""
        if not uids:
            return []
        fresh = self.ledgers.fresh(tenant)
        reserved = {reservation_uid(k, r) for k, r in fresh.reservations.items()}
        return [uid for uid in uids if uid not in reserved]

    def _report_recount(self, tenant: str, uids: list[str], gpus: dict[str, GpuAmount]) -> None:
        """Say so when live pods had to be counted from their specs: the settled-pods store lost them
        (deleted by hand?), or they were created while the webhook was bypassed."""
        total = sum(gpus[uid].total for uid in uids)
        with self._pods_lock:
            names = sorted(f"{f.namespace}/{f.name}" for uid in uids if (f := self._pods.get(uid)))
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        message = (
            f"counted {len(uids)} running GPU pods ({total} GPUs) from their specs: they had no record in "
            f"the settled-pods store (labgate-gpu-settled.{tenant}.*) and no reservation: {shown}"
        )
        log.warning("tenant %s: %s", tenant, message)
        RECOUNTED.labels(tenant).inc(len(uids))
        self._record_event(tenant, "GpuUsageRecounted", message, kind="Warning")

    def _enqueue_pending_reservations(self) -> None:
        """Tenants with reservations not yet settled, so that those whose pod never came expire."""
        for key, _ in self.cache.select(lambda k, _: k[1] == "Tenant"):
            if self.ledgers.cached(key[3]).reservations:
                self.queue.add(key[3])

    def start(self) -> None:
        self.ledgers.start()
        self.settled.start()
        for reflector in self._reflectors:
            reflector.start()
        self.leader.start()
        for worker in self._workers:
            worker.start()

    def stop(self) -> None:
        self._stop.set()
        self.leader.stop()
        for reflector in self._reflectors:
            reflector.stop()
        self.ledgers.stop()
        self.settled.stop()
        for worker in self._workers:
            worker.join(timeout=5)

    @property
    def is_synced(self) -> bool:
        return (
            self.ledgers.is_synced
            and self.settled.is_synced
            and all(r.has_synced.is_set() for r in self._reflectors)
        )

    def _on_elected(self) -> None:
        self.enqueue_all()

    def enqueue_all(self) -> None:
        for key, _ in self.cache.select(lambda k, _: k[1] == "Tenant"):
            self.queue.add(key[3])

    def _work(self, index: int) -> None:
        next_resync = time.monotonic() + self.resync_seconds
        next_sweep = time.monotonic() + LEDGER_SWEEP_SECONDS
        next_certificates = time.monotonic()
        while not self._stop.is_set():
            if index == 0 and self.certificates is not None and time.monotonic() >= next_certificates:
                next_certificates = time.monotonic() + self.certificate_check_seconds
                self._rotate_certificates()
            if index == 0 and time.monotonic() >= next_resync:
                self.enqueue_all()
                next_resync = time.monotonic() + self.resync_seconds
            if index == 0 and time.monotonic() >= next_sweep:
                self._enqueue_pending_reservations()
                next_sweep = time.monotonic() + LEDGER_SWEEP_SECONDS
            if not (self.is_synced and self.leader.is_leader):
                self._stop.wait(0.1)
                continue
            name = self.queue.get(timeout=0.5)
            if name is None:
                continue
            try:
                with self._shared_lock:
                    if not self._shared_applied:
                        for shared in [*shared_cluster_roles(), *shared_priority_classes()]:
                            self._ensure(shared, tenant=None)
                        self._shared_applied = True
                self.reconcile(name)
                with self._shared_lock:
                    self.reconciled += 1
            except NotLeaderError:
                log.warning("lost the lease while reconciling %s; another replica takes over", name)
                self._shared_applied = False
            except ApiException as err:
                log.warning("reconciling tenant %s failed (%s %s); retrying", name, err.status, err.reason)
                self._stop.wait(0.5)
                self.queue.add(name)
            except Exception:
                log.exception("reconciling tenant %s failed; retrying", name)
                self._stop.wait(1.0)
                self.queue.add(name)
            finally:
                self.queue.done(name)

    def _rotate_certificates(self) -> None:
        """One step of the webhook certificates' rotation, by the leader only."""
        if self.certificates is None or not self.leader.is_leader:
            return
        try:
            step = self.certificates.step()
        except (ApiException, OSError) as err:
            log.warning("webhook certificates: %s; retrying", err)
            return
        if step != "none":
            log.info("webhook certificates: %s", step)
            WRITES.labels("certificates").inc()

    # -- writes (leader only) ---------------------------------------------------------------------

    def _check_leader(self) -> None:
        if not self.leader.is_leader:
            raise NotLeaderError

    def _ensure(self, obj: Manifest, *, tenant: Tenant | None) -> bool:
        """Apply `obj` unless the live copy already has every field it sets; True if it wrote."""
        kind = kind_of(obj)
        live = self.cache.get(object_key(obj))
        if live is not None and is_subset(
            obj, {**live, "apiVersion": obj["apiVersion"], "kind": obj["kind"]}
        ):
            return False
        self._check_leader()
        result = self.kube.apply(obj)
        WRITES.labels("apply").inc()
        self.cache.upsert(kind, result)
        if tenant is not None and self._is_provisioned(tenant):
            REPAIRS.labels(kind.kind).inc()
            where = f"{obj['metadata'].get('namespace')}/" if obj["metadata"].get("namespace") else ""
            self._record_event(
                tenant.name, "DriftRepaired", f"restored {kind.kind} {where}{obj['metadata']['name']}"
            )
        return True

    def _delete(self, key: Key) -> None:
        self._check_leader()
        kind = next(k for k in (*MANAGED_KINDS, NAMESPACE) if (k.api_version, k.kind) == key[:2])
        self.kube.delete(kind, key[3], namespace=key[2] or None)
        WRITES.labels("delete").inc()

    def _is_provisioned(self, tenant: Tenant) -> bool:
        live = self.cache.get(("labgate.io/v1alpha1", "Tenant", "", tenant.name)) or {}
        return bool(live.get("status", {}).get("observedGeneration") == tenant.generation)

    def _record_event(self, tenant_name: str, reason: str, message: str, *, kind: str = "Normal") -> None:
        live = self.cache.get(("labgate.io/v1alpha1", "Tenant", "", tenant_name)) or {}
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{tenant_name}.{uuid.uuid4().hex[:10]}", "namespace": "default"},
            "involvedObject": {
                "apiVersion": "labgate.io/v1alpha1",
                "kind": "Tenant",
                "name": tenant_name,
                "uid": live.get("metadata", {}).get("uid", ""),
            },
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": FIELD_MANAGER},
            "firstTimestamp": _now(),
            "lastTimestamp": _now(),
            "count": 1,
        }
        try:
            self.kube.create(EVENT, event, namespace="default")
        except ApiException as err:  # an event is a courtesy; never fail a repair over it
            log.warning("could not record event for tenant %s: %s", tenant_name, err.reason)

    # -- one tenant -------------------------------------------------------------------------------

    def _owned(self, tenant_name: str) -> list[tuple[Key, Object]]:
        return [
            (k, o)
            for k, o in self.cache.labelled_for(tenant_name)
            if k[1] != "Namespace" and _labels(o).get(MANAGED_BY_LABEL) == MANAGED_BY
        ]

    def _labelled_namespaces(self, tenant_name: str) -> set[str]:
        return {k[3] for k, _ in self.cache.labelled_for(tenant_name) if k[1] == "Namespace"}

    def reconcile(self, name: str) -> None:
        """Make tenant `name`'s objects match its spec (or clean up after it)."""
        live_tenant = self.cache.get(("labgate.io/v1alpha1", "Tenant", "", name))
        if live_tenant is None:
            self._clean_up(name, delete_namespaces=False)
            return
        tenant = Tenant.from_object(live_tenant)
        if tenant.is_deleting:
            self._finalize(tenant)
            return
        if FINALIZER not in tenant.finalizers:
            self._check_leader()
            self.kube.json_patch(TENANT, name, finalizer_added(live_tenant))
            WRITES.labels("patch").inc()
        namespaces = tenant_namespaces(tenant, self._labelled_namespaces(name))
        desired = desired_objects(tenant, namespaces=namespaces)
        for obj in desired:
            self._ensure(obj, tenant=tenant)
        wanted = {object_key(o) for o in desired}
        for key, _ in self._owned(name):
            if key not in wanted:
                self._delete(key)  # e.g. a binding of a namespace the tenant dropped
        gpus = self._maintain_ledger(name)
        self._update_status(tenant, live_tenant, namespaces, gpus)

    def _pod_counts(self, tenant: str, namespaces: list[str]) -> tuple[int, int]:
        """(GPUs of the tenant's unfinished preemptible pods, pods admitted that do not run yet)."""
        reservations = self.ledgers.cached(tenant).reservations
        with self._pods_lock:
            facts = [
                self._pods[uid]
                for namespace in namespaces
                for uid in self._pods_by_namespace.get(namespace, set())
                if uid in self._pods
            ]
            unseen = sum(1 for key, r in reservations.items() if reservation_uid(key, r) not in self._pods)
        preemptible = sum(f.gpus.total for f in facts if f.is_preemptible and f.phase not in FINISHED_PHASES)
        return preemptible, pending_pods([f.phase for f in facts], unseen)

    def _update_status(
        self, tenant: Tenant, live: Object, namespaces: list[str], gpus: GpuAmount | None
    ) -> None:
        if gpus is None:  # unknown (ledger unreadable): keep what the status says
            shown = (live.get("status") or {}).get("gpu") or {}
            gpus = GpuAmount(total=shown.get("used") or 0, by_model=shown.get("usedByModel") or {})
        states = []
        for ns in namespaces:
            obj = self.cache.get(("v1", "Namespace", "", ns))
            phase = (obj or {}).get("status", {}).get("phase", "Pending") if obj else "Pending"
            states.append({"name": ns, "state": phase})
        ready = all(s["state"] == "Active" for s in states)
        old = live.get("status") or {}
        old_ready: dict[str, Any] = next(
            (c for c in old.get("conditions", []) if c.get("type") == "Ready"), {}
        )
        condition = {
            "type": "Ready",
            "status": "True" if ready else "False",
            "observedGeneration": tenant.generation,
            "reason": "Provisioned" if ready else "NamespacesPending",
            "message": f"{len(namespaces)} namespaces provisioned"
            if ready
            else "waiting for namespaces to become Active",
        }
        preemptible, pending = self._pod_counts(tenant.name, namespaces)
        summary = gpu_summary(
            total=tenant.spec.gpu.total,
            models=tenant.spec.gpu.models,
            used_total=gpus.total,
            used_by_model=gpus.by_model,
        )
        status = {
            "observedGeneration": tenant.generation,
            "namespaceList": ",".join(namespaces),
            "namespaces": states,
            # An empty map is left out: server-side apply turns a map emptied of the keys it owned
            # into null, which the schema refuses, and the status would stay stuck at its old usage.
            "gpu": {
                "used": gpus.total,
                **({"usedByModel": dict(gpus.by_model)} if gpus.by_model else {}),
                "summary": summary,
                "preemptible": preemptible,
                "pendingPods": pending,
            },
        }
        GPU_USED.labels(tenant.name, "all").set(gpus.total)
        for model, count in gpus.by_model.items():
            GPU_USED.labels(tenant.name, model).set(count)
        if tenant.spec.gpu.total is not None:
            GPU_LIMIT.labels(tenant.name, "all").set(tenant.spec.gpu.total)
        for model, limit in tenant.spec.gpu.models.items():
            GPU_LIMIT.labels(tenant.name, model).set(limit)
        old_gpu = old.get("gpu") or {}
        unchanged = (
            is_subset({k: v for k, v in status.items() if k != "gpu"}, old)
            and (old_gpu.get("used"), old_gpu.get("usedByModel") or {}) == (gpus.total, gpus.by_model)
            and (old_gpu.get("summary"), old_gpu.get("preemptible"), old_gpu.get("pendingPods"))
            == (summary, preemptible, pending)
            and all(old_ready.get(k) == v for k, v in condition.items())
        )
        if unchanged:
            return
        condition["lastTransitionTime"] = (
            old_ready["lastTransitionTime"]
            if old_ready.get("status") == condition["status"] and "lastTransitionTime" in old_ready
            else _now()
        )
        self._check_leader()
        result = self.kube.apply(
            {
                "apiVersion": "labgate.io/v1alpha1",
                "kind": "Tenant",
                "metadata": {"name": tenant.name},
                "status": {**status, "conditions": [condition]},
            },
            subresource="status",
        )
        WRITES.labels("status").inc()
        self.cache.upsert(TENANT, result)

    def _finalize(self, tenant: Tenant) -> None:
        self._clean_up(
            tenant.name,
            delete_namespaces=not tenant.spec.namespaces.keep_on_delete,
            named=tuple(tenant.spec.namespaces.names),
        )
        if FINALIZER in tenant.finalizers:
            self._check_leader()
            self.kube.json_patch(TENANT, tenant.name, finalizer_removed(tenant.finalizers))
            WRITES.labels("patch").inc()

    def _clean_up(self, name: str, *, delete_namespaces: bool, named: tuple[str, ...] = ()) -> None:
        """Delete what labgate made for tenant `name`; with `delete_namespaces`, also its namespaces
        (the ones it named and the ones under its prefix that carry its label)."""
        for key, _ in self._owned(name):
            self._delete(key)
        if delete_namespaces:
            for namespace in sorted(set(named) | self._labelled_namespaces(name)):
                self._delete(("v1", "Namespace", "", namespace))


def watch_stats(reconciler: Reconciler) -> dict[str, Any]:
    """Counters for benchmarks: requests and writes made, tenants reconciled, queue depth."""
    return {
        "requests": reconciler.kube.requests,
        "writes": reconciler.kube.writes,
        "reconciled": reconciler.reconciled,
        "queued": len(reconciler.queue),
    }
