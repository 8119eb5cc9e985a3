"""The GPU settlement controller: follows every pod (one cluster-wide watch), and for each tenant
whose pods or reservations changed, settles its GPU reservations into the settled-pods store and the
ledger, releases those whose pod never came, and records live GPU pods nobody counted. With the
same write it keeps the ledger's `workloads` current: what the tenant's live pods ask of CPU, memory
and pod slots (the usage the tenant-quota rule reads).

Its queue is its own: a pod event enqueues only the settlement of that pod's tenant, never the
tenant's RBAC reconcile, and a settlement that keeps losing the ledger's compare-and-swap delays no
drift repair. The arithmetic is pure (labgate/gpu_accounting/settlement.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from prometheus_client import Counter

from labgate.core.api_resources import Kind, Object
from labgate.core.gpu_amount import GpuAmount
from labgate.core.kube import KubeApi
from labgate.core.tenant import TENANT_LABEL, Tenant, TenantLimits
from labgate.gpu_accounting.demand import GpuCounting, whole_gpu_model
from labgate.gpu_accounting.ledger import Ledger, LedgerConflictError, LedgerCorruptError
from labgate.gpu_accounting.ledger import now as ledger_now
from labgate.gpu_accounting.ledger_store import LedgerCache
from labgate.gpu_accounting.pod_gpus import is_admitted_preemptible, is_behind_admission_gate, pod_gpus
from labgate.gpu_accounting.pod_requests import pod_requests
from labgate.gpu_accounting.settled_pods import SettledPods
from labgate.gpu_accounting.settlement import (
    PodFacts,
    Settlement,
    expired_unseen,
    recount_message,
    recounted,
    reserved_uids,
    settle_tenant,
    uids_to_watch,
)
from rbac.claim_index import ClaimIndex
from rbac.runtime import WRITES, LeaderGate, ObjectCache, WorkQueue, labels
from rbac.tenant_events import TenantEvents, tenant_key

log = logging.getLogger(__name__)

POD = Kind("Pod", "", "v1", "pods", is_namespaced=True)
# How long the uids of deleted pods are remembered (a late reservation of one is released at once).
GONE_MEMORY_SECONDS = 300.0
# A settlement that keeps losing the ledger's compare-and-swap gives up after this many tries (the
# next event or sweep tries again).
SETTLE_ATTEMPTS = 5

UNREADABLE_PODS = Counter(
    "labgate_pods_unreadable_total",
    "Pod events whose spec the reconciler could not read (kept as present; its log names each)",
)
RECOUNTED = Counter(
    "labgate_gpu_pods_recounted_total",
    "Live GPU pods with neither a settled record nor a reservation, recorded from their specs",
    ["tenant"],
)


def tenant_of_namespace(cache: ObjectCache, namespace: str) -> str | None:
    return labels(cache.get(("v1", "Namespace", "", namespace)) or {}).get(TENANT_LABEL)


def controller_uid(metadata: Object) -> str:
    """The uid of the object's controller (its ownerReference with controller: true), "" if none."""
    owners = metadata.get("ownerReferences") or []
    return next((str(o.get("uid", "")) for o in owners if o.get("controller")), "")


def labelled_namespaces(cache: ObjectCache, tenant: str) -> set[str]:
    return {k[3] for k, _ in cache.labelled_for(tenant) if k[1] == "Namespace"}


class PodIndex:
    """The pod reflector's state: every pod's facts by uid, the uids in each namespace, and the
    uids of pods seen deleted lately. `on_tenant(name)` hears of each tenant whose pods changed,
    `on_gone(name, uid)` (by default `on_tenant`) of each tenant pod seen deleted."""

    def __init__(
        self,
        cache: ObjectCache,
        gpu_counting: GpuCounting,
        *,
        on_tenant: Callable[[str], None],
        on_gone: Callable[[str, str], None] | None = None,
    ):
        self._cache = cache
        self._gpu_counting = gpu_counting
        self._on_tenant = on_tenant
        self._on_gone = on_gone or (lambda tenant, _: on_tenant(tenant))
        self._lock = threading.Lock()
        self._pods: dict[str, PodFacts] = {}
        self._by_namespace: dict[str, set[str]] = {}
        # uid -> when the pod was seen gone: its reservation, if not yet settled, is released at once.
        self._gone: dict[str, float] = {}

    def _facts(self, obj: Object) -> PodFacts:
        metadata = obj["metadata"]
        return PodFacts(
            namespace=str(metadata["namespace"]),
            name=str(metadata["name"]),
            phase=str((obj.get("status") or {}).get("phase", "")),
            gpus=pod_gpus(obj, self._gpu_counting),
            is_preemptible=is_admitted_preemptible(obj),
            is_scheduled=bool((obj.get("spec") or {}).get("nodeName")),
            is_gated=is_behind_admission_gate(obj),
            requests=pod_requests(obj),
            whole_model=whole_gpu_model(obj.get("spec") or {}, self._gpu_counting.gpu_model_label),
            node=str((obj.get("spec") or {}).get("nodeName") or ""),
            controller_uid=controller_uid(metadata),
        )

    def _facts_or_presence(self, obj: Object) -> PodFacts:
        """The pod's facts; for a pod whose spec cannot be read, only that it exists, where and in
        which phase. One such pod must not stop the index (every event and list of every pod would
        fail with it, and the settlement drops the settled GPUs of pods it no longer sees): kept
        present, its settled record and reservation stay counted; it asks nothing more."""
        try:
            return self._facts(obj)
        except Exception:  # an unforeseen form of some field: counted below, never the index's end
            metadata = obj.get("metadata") or {}
            log.exception(
                "pod %s/%s: its spec could not be read", metadata.get("namespace"), metadata.get("name")
            )
            UNREADABLE_PODS.inc()
            spec = obj.get("spec") or {}
            return PodFacts(
                namespace=str(metadata.get("namespace", "")),
                name=str(metadata.get("name", "")),
                phase=str((obj.get("status") or {}).get("phase", "")),
                gpus=GpuAmount(),
                is_preemptible=False,
                is_scheduled=bool(spec.get("nodeName")),
                node=str(spec.get("nodeName") or ""),
            )

    def on_list(self, objects: list[Object]) -> None:
        pods = {str(o["metadata"].get("uid", "")): self._facts_or_presence(o) for o in objects}
        by_namespace: dict[str, set[str]] = {}
        for uid, facts in pods.items():
            by_namespace.setdefault(facts.namespace, set()).add(uid)
        with self._lock:
            for uid in set(self._pods) - set(pods):  # deleted while the watch was down
                self._gone[uid] = time.monotonic()
            self._pods, self._by_namespace = pods, by_namespace
        for tenant in {tenant_of_namespace(self._cache, ns) for ns in by_namespace}:
            if tenant:
                self._on_tenant(tenant)

    def on_event(self, event: str, obj: Object) -> None:
        metadata = obj["metadata"]
        uid = str(metadata.get("uid", ""))
        namespace = str(metadata["namespace"])
        tenant = tenant_of_namespace(self._cache, namespace)
        facts = None if event == "DELETED" else self._facts_or_presence(obj)
        with self._lock:
            if facts is None:
                self._pods.pop(uid, None)
                self._by_namespace.get(namespace, set()).discard(uid)
                if tenant is not None:  # only tenants' pods have reservations
                    self._gone[uid] = time.monotonic()
            else:
                self._pods[uid] = facts
                self._by_namespace.setdefault(namespace, set()).add(uid)
        if tenant is not None and facts is None:
            self._on_gone(tenant, uid)
        elif tenant is not None:
            self._on_tenant(tenant)

    def known(self, uids: set[str]) -> dict[str, PodFacts]:
        """The facts of those of `uids` the watch shows."""
        with self._lock:
            return {uid: self._pods[uid] for uid in uids if uid in self._pods}

    def in_namespaces(self, namespaces: set[str] | list[str]) -> dict[str, PodFacts]:
        with self._lock:
            return {
                uid: self._pods[uid]
                for namespace in namespaces
                for uid in self._by_namespace.get(namespace, ())
                if uid in self._pods
            }

    def recently_gone(self) -> frozenset[str]:
        """Uids of pods seen deleted recently (older ones no longer matter: a reservation whose pod
        never showed up has expired by then)."""
        horizon = time.monotonic() - GONE_MEMORY_SECONDS
        with self._lock:
            for uid in [u for u, seen in self._gone.items() if seen < horizon]:
                del self._gone[uid]
            return frozenset(self._gone)

    def is_any_gone(self, uids: Collection[str]) -> bool:
        """Whether a pod of `uids` was seen deleted."""
        with self._lock:
            return any(uid in self._gone for uid in uids)


class SettlementController:
    """Settles one tenant's GPU reservations per queued name; `on_settled(name)` afterwards (the
    Tenant status shows the usage)."""

    def __init__(
        self,
        kube: KubeApi,
        cache: ObjectCache,
        ledgers: LedgerCache,
        settled: SettledPods,
        *,
        gate: LeaderGate,
        events: TenantEvents,
        gpu_counting: GpuCounting,
        on_settled: Callable[[str], None] = lambda _: None,
        queue: WorkQueue | None = None,
        limit_defaults: TenantLimits | None = None,
    ):
        """`limit_defaults`: the infra team's default tenant limits (policy config tenant_limits)."""
        self.limit_defaults = limit_defaults or TenantLimits()
        self.kube = kube
        self.cache = cache
        self.ledgers = ledgers
        self.settled = settled
        self.queue = queue if queue is not None else WorkQueue()
        self.pods = PodIndex(cache, gpu_counting, on_tenant=self.queue.add, on_gone=self.pod_gone)
        self.claims = ClaimIndex(
            gpu_counting, tenant_of=lambda ns: tenant_of_namespace(cache, ns), on_tenant=self.queue.add
        )
        self._gate = gate
        self._events = events
        self._on_settled = on_settled
        self.settlements = 0  # tenants settled since start (for tests)

    def pod_gone(self, tenant: str, uid: str) -> None:
        """A tenant's pod was deleted. If the ledger still holds its reservation (created and deleted
        before it was settled), the tenant is settled at once, not at its pace: the API has finished
        the deletion, and the researcher may be creating the next pod now, which the reservation of
        the one that is gone would refuse (the webhook's live count cannot tell it from a pod not
        created yet). A settled pod's deletion waits for the pace (the live count sees it go)."""
        self.queue.add(tenant, at_once=uid in self._reserved(tenant))

    def ledger_holds_reservations(self, tenant: str) -> None:
        """The tenant's ledger was seen holding reservations: settle them; at once if one is of a pod
        already seen deleted (the pod watch ran ahead of the ledger's)."""
        self.queue.add(tenant, at_once=self.pods.is_any_gone(self._reserved(tenant)))

    def _reserved(self, tenant: str) -> set[str]:
        try:
            return reserved_uids(self.ledgers.cached(tenant))
        except LedgerCorruptError:
            return set()

    def enqueue_pending_reservations(self) -> None:
        """Tenants with reservations not yet settled, so that those whose pod never came expire."""
        for key, _ in self.cache.select(lambda k, _: k[1] == "Tenant"):
            try:
                if self.ledgers.cached(key[3]).reservations:
                    self.queue.add(key[3])
            except LedgerCorruptError:
                continue

    def handle(self, tenant: str) -> None:
        """Settle, release and expire the tenant's GPU reservations.

        Settled pods are written first, the ledger second: a pod is never in neither (a crash in
        between counts it twice until the next pass, which is the safe way to be wrong). A ledger
        that does not parse is left for a person to repair."""
        try:
            self.settle(tenant)
        except LedgerCorruptError as err:
            log.error("%s; not maintaining it until it is repaired", err)
        self.settlements += 1
        self._on_settled(tenant)

    def settle(self, tenant: str) -> Ledger:
        """Settle `tenant` (compare-and-swap, re-read on a lost race); return the ledger as written."""
        ledger = self.ledgers.cached(tenant)
        for _ in range(SETTLE_ATTEMPTS):
            settlement = self._decide(tenant, ledger)
            try:
                return self._write(tenant, ledger, settlement)
            except LedgerConflictError:
                ledger = self.ledgers.fresh(tenant)
        return ledger

    def _decide(self, tenant: str, ledger: Ledger) -> Settlement:
        self.settled.ensure_at_least(tenant, ledger.settled_versions)
        settled_pods = self.settled.pods(tenant)
        seen = self.pods.known(uids_to_watch(ledger, settled_pods))
        gone = self.pods.recently_gone()
        looked_up = self._read_expired_unseen(ledger, seen)
        return settle_tenant(
            ledger,
            settled_pods,
            seen=seen,
            tenant_pods=self.pods.in_namespaces(labelled_namespaces(self.cache, tenant)),
            looked_up=looked_up,
            gone_pod_uids=gone,
            now=ledger_now(),
            allocations=self.claims.allocations(),
        )

    def _read_expired_unseen(self, ledger: Ledger, seen: dict[str, PodFacts]) -> dict[str, str]:
        """Phases of the pods of expired reservations that the watch has not shown, from the API."""
        found: dict[str, str] = {}
        for pod in expired_unseen(ledger, seen, now=ledger_now()):
            live = self.kube.get(POD, pod.name, namespace=pod.namespace)
            if live is not None and live.get("metadata", {}).get("uid") == pod.uid:
                found[pod.uid] = str((live.get("status") or {}).get("phase", ""))
        return found

    def is_limited(self, tenant: str) -> bool:
        """Whether the tenant has a CPU, memory or pod limit (its own or a default): only then does
        its ledger carry its live pods' requests, so that tenants without limits write their ledger
        no more often than before (GPU pods' compare-and-swap meets no extra writes)."""
        live = self.cache.get(tenant_key(tenant))
        if live is None:
            return False
        limits = Tenant.from_object(live).spec.limits.with_defaults(self.limit_defaults)
        return any(value is not None for value in (limits.cpu, limits.memory, limits.pods))

    def _write(self, tenant: str, ledger: Ledger, settlement: Settlement) -> Ledger:
        # The live pods' requests ride along (the webhook reads them for tenant-quota).
        workloads = settlement.workloads if self.is_limited(tenant) else {}
        updated = settlement.ledger.model_copy(update={"workloads": workloads})
        if settlement.is_settled_changed:
            self._gate.check()
            versions = self.settled.write(tenant, settlement.settled)  # a lost compare-and-swap re-reads
            WRITES.labels("ledger").inc()
            updated = updated.model_copy(update={"settled_versions": versions})
            if uids := self._truly_unreserved(tenant, recounted(settlement)):
                self._report_recount(tenant, uids, settlement)
        if updated == ledger:
            return ledger
        self._gate.check()
        written = self.ledgers.write(updated)
        WRITES.labels("ledger").inc()
        return written

    def _truly_unreserved(self, tenant: str, uids: list[str]) -> list[str]:
        """The pods among `uids` that the ledger, read afresh, holds no reservation for: a repair to
        report. (A pod seen an instant before its reservation reached this replica's cache is not.)"""
        if not uids:
            return []
        reserved = reserved_uids(self.ledgers.fresh(tenant))
        return [uid for uid in uids if uid not in reserved]

    def _report_recount(self, tenant: str, uids: list[str], settlement: Settlement) -> None:
        """Say so when live pods had to be counted from their specs: the settled-pods store lost them
        (deleted by hand?), or they were created while the webhook was bypassed."""
        gpus = sum(settlement.unrecorded[uid].total for uid in uids)
        names = [f"{f.namespace}/{f.name}" for f in self.pods.known(set(uids)).values()]
        message = recount_message(names, pods=len(uids), gpus=gpus, tenant=tenant)
        log.warning("tenant %s: %s", tenant, message)
        RECOUNTED.labels(tenant).inc(len(uids))
        self._events.record(tenant, "GpuUsageRecounted", message, kind="Warning")
