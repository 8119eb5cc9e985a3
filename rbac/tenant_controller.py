"""The tenant controller: makes each Tenant's objects match rbac.desired (server-side apply under one
field manager, only what drifted), runs its finalizer on deletion, and keeps its status.

Two queues: `TenantController` provisions (and repairs drift, and cleans up) per queued tenant;
`TenantStatusController` writes the status, queued after a provisioning pass and after each GPU
settlement, so that a pod's coming and going updates the usage shown without an RBAC reconcile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from prometheus_client import Counter

from labgate.core.api_resources import (
    CLUSTER_QUEUE,
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
    LIMIT_RANGE,
    LOCAL_QUEUE,
    NAMESPACE,
    NETWORK_POLICY,
    RESOURCE_FLAVOR,
    RESOURCE_QUOTA,
    ROLE_BINDING,
    SERVICE_ACCOUNT,
    TENANT,
    Kind,
    Object,
    kind_of,
)
from labgate.core.kube import KubeApi
from labgate.core.metrics import GPU_LIMIT, GPU_USED
from labgate.core.queue_config import QueueConfig
from labgate.core.tenant import FINALIZER, MANAGED_BY, MANAGED_BY_LABEL, TENANT_LABEL, Tenant, TenantLimits
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.ledger import (
    FINISHED_PHASES,
    GpuAmount,
    LedgerCorruptError,
    usage,
)
from labgate.gpu_accounting.ledger_store import LedgerCache
from labgate.gpu_accounting.pool_capacity import QUOTA_CONDITION, capacity_document, quota_condition
from rbac.desired import (
    METADATA_ADDRESSES,
    Manifest,
    desired_objects,
    is_subset,
    object_key,
    shared_cluster_roles,
    shared_priority_classes,
    tenant_namespaces,
)
from rbac.node_index import NodeIndex
from rbac.outside_queue import NOTHING_HELD, HeldOutsideQueue
from rbac.queues import FLAVOR_LABEL, GPU_MODEL_LABEL, queued, shared_flavors, tenant_queues
from rbac.removal import Removal
from rbac.runtime import WRITES, Key, LeaderGate, ObjectCache, WorkQueue, labels
from rbac.settlement_controller import PodIndex, labelled_namespaces
from rbac.tenant_events import TenantEvents, now_timestamp, tenant_key
from rbac.tenant_status import (
    PodCounts,
    is_unchanged,
    old_condition,
    shown_usage,
    tenant_status,
    with_transition_time,
)
from rbac.tenant_view import pending_pods

MANAGED_KINDS = (
    ROLE_BINDING,
    SERVICE_ACCOUNT,
    RESOURCE_QUOTA,
    LIMIT_RANGE,
    NETWORK_POLICY,
    CLUSTER_ROLE,
    CLUSTER_ROLE_BINDING,
)
# With Kueue (reconcile --kueue): each tenant's queues, and the flavors its pools make (rbac/queues.py).
KUEUE_KINDS = (CLUSTER_QUEUE, LOCAL_QUEUE, RESOURCE_FLAVOR)

REPAIRS = Counter("labgate_reconcile_repairs_total", "Managed objects restored after drift", ["kind"])

# Not __name__: tests/unit/tenancy/test_controllers.py reads the drift-repair line under this name.
log = logging.getLogger(__name__)


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


# What a deleted tenant's kept namespaces keep (spec.namespaces.keepOnDelete): its pods go on running
# there, so the restrictions stay (the baseline NetworkPolicies keep them apart from other tenants and
# the metadata address, the quotas and defaults bound them) while the grants go (bindings, service
# account, queues). They go with the namespace, or when the platform takes its tenant label off.
RESTRICTION_KINDS = frozenset((k.api_version, k.kind) for k in (NETWORK_POLICY, RESOURCE_QUOTA, LIMIT_RANGE))


def kept_on_delete(key: Key, kept_namespaces: set[str]) -> bool:
    """Whether a deleted tenant's object `key` stays: a restriction in a namespace it kept."""
    return key[:2] in RESTRICTION_KINDS and key[2] in kept_namespaces


def held_by_other_tenants(cache: ObjectCache, tenant: Tenant) -> dict[str, str]:
    """The namespaces `tenant` names that carry another live tenant's label, each with that tenant.
    Such a namespace is not taken: relabelling it would hand its running pods and its members' work
    to this tenant, and two Tenants naming one namespace (two writes the webhook admitted at once,
    or a namespace the platform moved while still listed) would take it from each other at every
    pass. A label naming a tenant that no longer exists (a deleted tenant's kept namespace) is no
    owner: listing the namespace gives it to this tenant, as the infra guide says."""
    held = {}
    for name in tenant.spec.namespaces.names:
        owner = labels(cache.get(("v1", "Namespace", "", name)) or {}).get(TENANT_LABEL)
        if owner and owner != tenant.name and cache.get(tenant_key(owner)) is not None:
            held[name] = owner
    return held


def _key(item: tuple[Key, Object]) -> Key:
    return item[0]


def held_namespaces(cache: ObjectCache, tenant: Tenant, held_elsewhere: dict[str, str]) -> list[str]:
    """The tenant's namespaces (rbac.desired.tenant_namespaces) but those another tenant holds."""
    named_or_labelled = tenant_namespaces(tenant, labelled_namespaces(cache, tenant.name))
    return [n for n in named_or_labelled if n not in held_elsewhere]


class TenantController:
    """Provisions, repairs and finalizes one tenant per queued name; `on_provisioned(name)` after a
    pass over a live tenant (its status follows)."""

    def __init__(
        self,
        kube: KubeApi,
        cache: ObjectCache,
        *,
        gate: LeaderGate,
        events: TenantEvents,
        on_provisioned: Callable[[str], None] = lambda _: None,
        limit_defaults: TenantLimits | None = None,
        kueue: bool = False,
        held_outside_queue: Callable[[str], HeldOutsideQueue] = lambda _: NOTHING_HELD,
        queue_config: QueueConfig | None = None,
        gpu_model_label: str = GPU_MODEL_LABEL,
        metadata_addresses: tuple[str, ...] = METADATA_ADDRESSES,
    ):
        """`limit_defaults`: the infra team's default tenant limits (policy config tenant_limits);
        `kueue`: Kueue is installed; each tenant also gets its queues (rbac/queues.py), whose GPU
        quota is less what `held_outside_queue(tenant)` says its pods hold that Kueue did not admit
        (rbac/queue_holdings.py); `queue_config`: the policies' queue config (where Kueue gates GPU
        pods, no labgate-gpu quota); `gpu_model_label`: the node label naming a pool's GPU model
        (GpuCounting's), under which a flavor's model quota is found; `metadata_addresses`: the
        policy config's, which no tenant's baseline egress opens."""
        self.kueue = kueue
        self.gpu_model_label = gpu_model_label
        self.metadata_addresses = metadata_addresses
        self.queue_config = queue_config or QueueConfig()
        self._held_outside_queue = held_outside_queue
        # What each tenant's ClusterQueue was last written for (is_queue_stale).
        self._held: dict[str, HeldOutsideQueue] = {}
        # The namespaces each tenant names that another tenant holds, as last reported.
        self._held_elsewhere: dict[str, dict[str, str]] = {}
        self.kinds: tuple[Kind, ...] = MANAGED_KINDS + (KUEUE_KINDS if kueue else ())
        self._removal = Removal(kube, gate=gate, kinds=(*self.kinds, NAMESPACE))
        self.kube = kube
        self.cache = cache
        self.limit_defaults = limit_defaults or TenantLimits()
        self.queue = WorkQueue()
        self._gate = gate
        self._events = events
        self._on_provisioned = on_provisioned
        self._lock = threading.Lock()
        self._shared_applied = False
        # The generation of each tenant whose objects this replica last made match its spec.
        self._provisioned: dict[str, int] = {}
        self.reconciled = 0  # tenants reconciled since start (for benchmarks and tests)

    def provisioned_generation(self, name: str) -> int | None:
        with self._lock:
            return self._provisioned.get(name)

    def handle(self, name: str) -> None:
        """One pass over tenant `name` (the shared ClusterRoles and PriorityClasses first, once)."""
        with self._lock:
            if not self._shared_applied:
                for shared in [*shared_cluster_roles(), *shared_priority_classes()]:
                    self._ensure(shared, tenant=None)
                self._shared_applied = True
        self.reconcile(name)
        with self._lock:
            self.reconciled += 1

    def on_lost_lease(self) -> None:
        with self._lock:
            self._shared_applied = False

    def reconcile(self, name: str) -> None:
        """Make tenant `name`'s objects match its spec (or clean up after it)."""
        live_tenant = self.cache.get(tenant_key(name))
        if live_tenant is None:
            self._clean_up(name, delete_namespaces=False)
            return
        tenant = Tenant.from_object(live_tenant)
        if tenant.is_deleting:
            self._finalize(tenant)
            return
        if FINALIZER not in tenant.finalizers:
            self._gate.check()
            self.kube.json_patch(TENANT, name, finalizer_added(live_tenant))
            WRITES.labels("patch").inc()
        held_elsewhere = held_by_other_tenants(self.cache, tenant)
        namespaces = held_namespaces(self.cache, tenant, held_elsewhere)
        desired = desired_objects(
            tenant,
            namespaces=namespaces,
            limit_defaults=self.limit_defaults,
            queue_config=self.queue_config,
            metadata_addresses=self.metadata_addresses,
        )
        if self.kueue:
            self._sync_flavors()
            desired += self._sync_queue(tenant, namespaces)
        for obj in desired:
            self._ensure(obj, tenant=tenant)
        wanted = {object_key(o) for o in desired}
        for key, live in self._owned(name):
            if key not in wanted:
                self._removal.remove(key, live)  # e.g. a binding of a namespace the tenant dropped
        self._report_held_elsewhere(tenant, held_elsewhere)
        with self._lock:
            self._provisioned[name] = tenant.generation
        self._on_provisioned(name)

    def _ensure(self, obj: Manifest, *, tenant: Tenant | None) -> bool:
        """Apply `obj` unless the live copy already has every field it sets; True if it wrote."""
        kind = kind_of(obj)
        live = self.cache.get(object_key(obj))
        if live is not None and is_subset(
            obj, {**live, "apiVersion": obj["apiVersion"], "kind": obj["kind"]}
        ):
            return False
        self._gate.check()
        result = self.kube.apply(obj)
        WRITES.labels("apply").inc()
        self.cache.upsert(kind, result)
        if tenant is not None and self._is_provisioned(tenant):
            REPAIRS.labels(kind.kind).inc()
            where = f"{obj['metadata'].get('namespace')}/" if obj["metadata"].get("namespace") else ""
            restored = f"restored {kind.kind} {where}{obj['metadata']['name']}"
            log.info("tenant %s: drift repaired: %s", tenant.name, restored)
            self._events.record(tenant.name, "DriftRepaired", restored)
        return True

    def is_queue_stale(self, name: str) -> bool:
        """Whether what tenant `name`'s pods hold outside Kueue changed since its ClusterQueue was
        last made (then its provisioning is due again)."""
        with self._lock:
            last = self._held.get(name, NOTHING_HELD)
        return self._held_outside_queue(name) != last

    def _sync_queue(self, tenant: Tenant, namespaces: list[str]) -> list[Manifest]:
        """The tenant's queues. Its ClusterQueue is written here when what its pods hold outside
        Kueue changed: an adjustment, said as such, not a drift repair."""
        held = self._held_outside_queue(tenant.name)
        queues = tenant_queues(tenant, namespaces=namespaces, held=held, model_label=self.gpu_model_label)
        with self._lock:
            is_adjusted = self._held.get(tenant.name, NOTHING_HELD) != held
        if is_adjusted and self._ensure(queues[0], tenant=None):
            self._report_adjusted(tenant, held)
        with self._lock:
            self._held[tenant.name] = held
        return queues

    def _report_held_elsewhere(self, tenant: Tenant, held: dict[str, str]) -> None:
        """A Warning on the Tenant when the namespaces it names that another tenant holds change (at
        the end of its pass: once it is recorded, that pass has left them)."""
        with self._lock:
            if self._held_elsewhere.get(tenant.name, {}) == held:
                return
            self._held_elsewhere[tenant.name] = held
        if held:
            shown = ", ".join(f"{n} (labelled for tenant {o})" for n, o in sorted(held.items()))
            message = (
                f"not taking namespaces another tenant holds: {shown}. Fix: remove them from "
                f"spec.namespaces.names, or have a cluster admin move them once their work is done"
            )
            log.warning("tenant %s: %s", tenant.name, message)
            self._events.record(tenant.name, "NamespaceHeldByAnotherTenant", message, kind="Warning")

    def _report_adjusted(self, tenant: Tenant, held: HeldOutsideQueue) -> None:
        if held.total:
            shown = ", ".join(held.pods[:3]) + (
                f" and {len(held.pods) - 3} more" if len(held.pods) > 3 else ""
            )
            message = f"GPU quota less {held.total} held by pods Kueue did not admit: {shown}"
        else:
            message = "GPU quota whole again: no pod holds GPUs outside Kueue"
        log.info("tenant %s: ClusterQueue %s", tenant.name, message)
        self._events.record(tenant.name, "QueueQuotaAdjusted", f"ClusterQueue {tenant.name}: {message}")

    def _sync_flavors(self) -> None:
        """The ResourceFlavors every live tenant's pools make (shared, so kept apart from any one
        tenant's objects); those no tenant names any more go."""
        tenants = [Tenant.from_object(o) for _, o in self.cache.select(lambda k, _: k[1] == "Tenant")]
        desired = shared_flavors(tenants)
        for flavor in desired:
            self._ensure(flavor, tenant=None)
        wanted = {object_key(f) for f in desired}
        for key, live in self.cache.select(
            lambda k, o: k[1] == RESOURCE_FLAVOR.kind and labels(o).get(FLAVOR_LABEL) == "true"
        ):
            if key not in wanted:
                self._removal.remove(key, live)

    def _is_provisioned(self, tenant: Tenant) -> bool:
        live = self.cache.get(tenant_key(tenant.name)) or {}
        return bool(live.get("status", {}).get("observedGeneration") == tenant.generation)

    def _owned(self, tenant_name: str) -> list[tuple[Key, Object]]:
        return [
            (k, o)
            for k, o in self.cache.labelled_for(tenant_name)
            if k[1] != "Namespace" and labels(o).get(MANAGED_BY_LABEL) == MANAGED_BY
        ]

    def _finalize(self, tenant: Tenant) -> None:
        """Clean up, then let the Tenant go; not while something was written since it was read (its
        watch event brings the tenant here again, the cache then up to date)."""
        if not self._clean_up(tenant.name, delete_namespaces=not tenant.spec.namespaces.keep_on_delete):
            return
        if FINALIZER in tenant.finalizers:
            self._gate.check()
            self.kube.json_patch(TENANT, tenant.name, finalizer_removed(tenant.finalizers))
            WRITES.labels("patch").inc()

    def _clean_up(self, name: str, *, delete_namespaces: bool) -> bool:
        """Delete what labgate made for tenant `name`; with `delete_namespaces`, also its namespaces:
        every one that carries its label, as last seen (one the Tenant names but the platform released
        or gave to another tenant is not its to delete). Without, a namespace that keeps the tenant's
        label keeps its restrictions (see `kept_on_delete`). False if something stayed (see rbac.removal)."""
        with self._lock:
            self._provisioned.pop(name, None)
            self._held.pop(name, None)
            self._held_elsewhere.pop(name, None)
        kept = set() if delete_namespaces else labelled_namespaces(self.cache, name)
        doomed = [(key, live) for key, live in self._owned(name) if not kept_on_delete(key, kept)]
        if delete_namespaces:
            namespaces = [(k, o) for k, o in self.cache.labelled_for(name) if k[1] == "Namespace"]
            doomed += sorted(namespaces, key=_key)
        gone = [self._removal.remove(key, live) for key, live in doomed]
        if self.kueue:
            self._sync_flavors()
        return all(gone)


class TenantStatusController:
    """Writes a provisioned tenant's status (namespaces, Ready, GPU usage and pods) when it changed;
    the usage comes from the ledger cache, the pods from the settlement controller's pod index."""

    def __init__(
        self,
        kube: KubeApi,
        cache: ObjectCache,
        ledgers: LedgerCache,
        pods: PodIndex,
        *,
        gate: LeaderGate,
        provisioned_generation: Callable[[str], int | None],
        queue: WorkQueue | None = None,
        kueue: bool = False,
        gpu_counting: GpuCounting | None = None,
        nodes: NodeIndex | None = None,
    ):
        """`kueue`: the status also shows what the tenant has queued in Kueue. `nodes`, fed by the
        reconciler's Node watch, is what the nodes of its pools hold (status.gpu.pools, the
        QuotaFitsPools condition) and where a pod without tolerations can land (status.nodes); a
        change there asks for every tenant's status (made here when
        not given)."""
        self.kueue = kueue
        self.gpu_counting = gpu_counting or GpuCounting()
        self.kube = kube
        self.cache = cache
        self.ledgers = ledgers
        self.pods = pods
        self.queue = queue if queue is not None else WorkQueue()
        self._gate = gate
        self._provisioned_generation = provisioned_generation
        self.nodes = nodes or NodeIndex(self.gpu_counting, on_changed=self.enqueue_all)

    def handle(self, name: str) -> None:
        live = self.cache.get(tenant_key(name))
        if live is None:
            return
        tenant = Tenant.from_object(live)
        # Only a generation whose objects are in place is reported (observedGeneration); the tenant
        # controller queues the status again once it has provisioned a newer one.
        if tenant.is_deleting or self._provisioned_generation(name) != tenant.generation:
            return
        held_elsewhere = held_by_other_tenants(self.cache, tenant)
        namespaces = held_namespaces(self.cache, tenant, held_elsewhere)
        gpus, counts = self._usage(live, namespaces)
        record_gpu_metrics(tenant, gpus)
        old = live.get("status") or {}
        pools, quota = self._pools(tenant, old)
        # Until the nodes are listed, as the live status says it (a restart does not blank it).
        nodes = self.nodes.open_nodes() if self.nodes.is_synced else old.get("nodes")
        phases = self._namespace_phases(namespaces)
        status, ready = tenant_status(
            tenant, namespaces, phases, gpus, counts, pools=pools, nodes=nodes, held_elsewhere=held_elsewhere
        )
        conditions = [ready, *quota]
        if is_unchanged(status, conditions, old):
            return
        self._gate.check()
        result = self.kube.apply(
            {
                "apiVersion": "labgate.io/v1alpha1",
                "kind": "Tenant",
                "metadata": {"name": tenant.name},
                "status": {
                    **status,
                    "conditions": [with_transition_time(c, old, now_timestamp()) for c in conditions],
                },
            },
            subresource="status",
        )
        WRITES.labels("status").inc()
        self.cache.upsert(TENANT, result)

    def enqueue_all(self) -> None:
        """Every tenant's status (a node's GPUs, labels or taints changed what its pools may hold, or
        where a pod without tolerations can land)."""
        for key, _ in self.cache.select(lambda k, _: k[1] == "Tenant"):
            self.queue.add(key[3])

    def _pools(self, tenant: Tenant, old: Object) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """status.gpu.pools and the QuotaFitsPools condition: from the nodes once they are listed,
        until then as the live status says them (a restart does not blank them); neither when
        labgate cannot tell what the pools hold."""
        if not self.nodes.is_synced:
            kept = {k: v for k, v in old_condition(old, QUOTA_CONDITION).items() if k != "lastTransitionTime"}
            return (old.get("gpu") or {}).get("pools"), [kept] if kept else []
        capacity = self.nodes.capacity_of(tenant)
        if capacity is None:
            return None, []
        return capacity_document(capacity), [quota_condition(tenant, capacity, self.gpu_counting)]

    def _namespace_phases(self, namespaces: list[str]) -> dict[str, str]:
        phases = {}
        for ns in namespaces:
            if (obj := self.cache.get(("v1", "Namespace", "", ns))) is not None:
                phases[ns] = str(obj.get("status", {}).get("phase", "Pending"))
        return phases

    def _usage(self, live: Object, namespaces: list[str]) -> tuple[GpuAmount, PodCounts]:
        """What the tenant uses (as the status shows it while the ledger is unreadable), and its pods
        (GPUs of unfinished preemptible pods; pods admitted that do not run yet)."""
        try:
            ledger = self.ledgers.cached(str(live["metadata"]["name"]))
        except LedgerCorruptError:
            gpus, reserved = shown_usage(live), []
        else:
            gpus = usage(ledger)
            reserved = list(ledger.reservations)
        facts = self.pods.in_namespaces(namespaces).values()
        seen = self.pods.known(set(reserved))
        unseen = sum(1 for uid in reserved if uid not in seen)
        preemptible = sum(f.gpus.total for f in facts if f.is_preemptible and f.phase not in FINISHED_PHASES)
        unscheduled = sorted(
            (f.name, f.gpus.total)
            for f in facts
            # a pod behind Kueue's gate holds nothing: it is queued (its Workload), not held
            if f.gpus.total > 0 and not f.is_scheduled and not f.is_gated and f.phase in ("", "Pending")
        )
        queued_workloads, queued_gpus = None, None
        if self.kueue:
            in_namespaces = set(namespaces)
            workloads = self.cache.select(lambda k, _: k[1] == "Workload" and k[2] in in_namespaces)
            queued_workloads, queued_gpus = queued([o for _, o in workloads])
        return gpus, PodCounts(
            preemptible=preemptible,
            pending=pending_pods([f.phase for f in facts], unseen),
            unscheduled=tuple(unscheduled),
            queued_workloads=queued_workloads,
            queued_gpus=queued_gpus,
        )


def record_gpu_metrics(tenant: Tenant, gpus: GpuAmount) -> None:
    GPU_USED.labels(tenant.name, "all").set(gpus.total)
    for model, count in gpus.by_model.items():
        GPU_USED.labels(tenant.name, model).set(count)
    if tenant.spec.gpu.total is not None:
        GPU_LIMIT.labels(tenant.name, "all").set(tenant.spec.gpu.total)
    for model, limit in tenant.spec.gpu.models.items():
        GPU_LIMIT.labels(tenant.name, model).set(limit)
