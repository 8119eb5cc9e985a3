"""The reconciler (`labgate reconcile`): the runtime (rbac/runtime.py) with the controllers plugged
in, and the reflectors whose events reach them.

- Watches, not polling: a change to a Tenant, a Namespace or a managed object enqueues that tenant's
  provisioning (rbac/tenant_controller.py); a pod, a ledger holding reservations or a deleted
  settled-pods shard enqueues only its GPU settlement (rbac/settlement_controller.py); both are
  followed by the tenant's status. With Kueue, a settlement (paced, see `Pacing`) also enqueues the
  tenant's provisioning when what its pods hold outside Kueue changed (rbac/queue_holdings.py): its
  ClusterQueue's GPU quota follows them. A periodic resync (default every 5 minutes) catches anything
  missed and writes nothing when nothing drifted.
- Only the leader writes (a coordination.k8s.io Lease, rbac/leader.py); followers keep their caches
  warm and take over when the lease expires. A leader that cannot renew stops writing before its
  lease runs out.
- Deleting a Tenant runs its finalizer: labgate's objects go; namespaces stay unless
  spec.namespaces.keepOnDelete is false (they hold data), keeping their tenant label so the admission
  policies refuse new work there until the infra team reassigns or deletes them, and keeping the
  restrictions on the pods that run on there (NetworkPolicies, quotas, LimitRange) while the grants go.
- In the chart's self-signed mode, the webhook certificates' rotation (rbac/cert_rotation.py) is a
  periodic task of its own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from labgate.core.api_resources import (
    NAMESPACE,
    NODE,
    RESOURCE_CLAIM,
    TENANT,
    WORKLOAD,
    Kind,
    Object,
)
from labgate.core.kube import ApiClient, KubeApi, Reflector
from labgate.core.queue_config import QueueConfig
from labgate.core.tenant import MANAGED_BY, MANAGED_BY_LABEL, TenantLimits
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.ledger_store import LedgerCache, LedgerStore
from labgate.gpu_accounting.settled_pods import SettledPods
from rbac.backstop_recount import SWEEP_SECONDS as BACKSTOP_SWEEP_SECONDS
from rbac.backstop_recount import BackstopRecount
from rbac.cert_rotation import CertificateManager, rotation_task
from rbac.desired import METADATA_ADDRESSES
from rbac.event_intake import EventIntake
from rbac.event_routes import Queue
from rbac.leader import LeaderElector
from rbac.node_index import NodeIndex
from rbac.queue_holdings import QueueHoldings
from rbac.queue_routes import QueueRoutes
from rbac.runtime import (
    FIELD_MANAGER,
    LeaderGate,
    ObjectCache,
    PeriodicTask,
    PeriodicTasks,
    Workers,
    WorkQueue,
)
from rbac.settlement_controller import POD, SettlementController
from rbac.tenant_controller import (
    TenantController,
    TenantStatusController,
    finalizer_added,
    finalizer_removed,
)
from rbac.tenant_events import TenantEvents


@dataclass(frozen=True)
class Pacing:
    """How often a tenant is settled and its status written, at most (seconds, by `clock`): a Job's
    burst of pod events costs a few ledger and status writes rather than one per event (issue 21).
    A pod's GPUs count all along (as its reservation until it is settled), so only how soon a
    finished pod's GPUs are free again, and the status shows it, waits for the interval; a pod
    deleted before it was settled is released at once (SettlementController.pod_gone).

    A pass over a tenant costs in proportion to its pods (about 60 ms of CPU at 10,000): a tenant's
    settlement and its status each take at most `busy_share` of one CPU, so that a large tenant is
    settled less often than every `settle_seconds` (every second or two at 10,000 pods) rather than at a
    cost that grows with the square of a launch's pods. Its reservations count until then, and the
    webhook's recount at the quota's edge reads the live pods (labgate.gpu_accounting.live_usage)."""

    settle_seconds: float = 1.0
    status_seconds: float = 2.0
    busy_share: float = 0.05
    # The watches of pods, claims and nodes (which feed only settlement and status) are read a burst
    # at a time (labgate.core.kube.Reflector): an event up to this late changes nothing that waits
    # for `settle_seconds`, and a Job's burst of pod events costs a wake-up per window instead of
    # one per event: 50 µs of CPU a pod event instead of 155 (docs/benchmarks.md).
    watch_batch_seconds: float = 0.05
    clock: Callable[[], float] = time.monotonic

    def queues(self) -> tuple[WorkQueue, WorkQueue]:
        """The settlement's queue and the status's."""
        return (
            WorkQueue(min_interval=self.settle_seconds, busy_share=self.busy_share, clock=self.clock),
            WorkQueue(min_interval=self.status_seconds, busy_share=self.busy_share, clock=self.clock),
        )


PACING = Pacing()


@dataclass(frozen=True)
class PolicyConfig:
    """What the reconciler follows of the policies' configuration (`labgate reconcile --gpu-config`,
    `--queue-config`): which resources are GPUs (for recounting live pods), the infra team's default
    tenant limits (config tenant_limits: the labgate-limits ResourceQuotas follow them), the cloud
    metadata addresses the baseline egress excepts (config metadata_addresses), and the queue
    config (where Kueue gates a tenant's GPU pods there is no labgate-gpu ResourceQuota:
    rbac.desired.has_gpu_backstop)."""

    gpu_counting: GpuCounting = field(default_factory=GpuCounting)
    limit_defaults: TenantLimits = field(default_factory=TenantLimits)
    queue_config: QueueConfig = field(default_factory=QueueConfig)
    # The cloud metadata addresses (config metadata_addresses): no baseline egress opens them.
    metadata_addresses: tuple[str, ...] = METADATA_ADDRESSES


__all__ = [
    "FIELD_MANAGER",
    "PACING",
    "Doors",
    "Pacing",
    "PolicyConfig",
    "Reconciler",
    "connect",
    "finalizer_added",
    "finalizer_removed",
]

# Tenants holding reservations are looked at this often, so that one whose pod never came is released
# within seconds of its expiry.
LEDGER_SWEEP_SECONDS = 2.0


@dataclass
class Doors:
    """The reconciler's ways out: the API, the Lease, the GPU ledgers and the settled pods."""

    kube: KubeApi
    leader: LeaderElector
    ledgers: LedgerCache
    settled: SettledPods


def connect(
    api: ApiClient,
    *,
    namespace: str,
    identity: str,
    lease_seconds: float,
    on_unsettled: Callable[[str], None],
    on_shard_deleted: Callable[[str], None],
) -> Doors:
    """The doors on a real API server; each has its own counters (lease renewals are not writes).
    `on_unsettled(tenant)`: a ledger holds reservations; `on_shard_deleted(tenant)`: a settled-pods
    shard is gone (both ask for the tenant's settlement)."""
    return Doors(
        kube=KubeApi(api, field_manager=FIELD_MANAGER),
        leader=LeaderElector(
            KubeApi(api, field_manager=FIELD_MANAGER),
            namespace=namespace,
            name="labgate-reconciler",
            identity=identity,
            lease_seconds=lease_seconds,
        ),
        ledgers=LedgerCache(
            LedgerStore(KubeApi(api, field_manager=FIELD_MANAGER), namespace=namespace),
            on_unsettled=on_unsettled,
        ),
        settled=SettledPods(
            KubeApi(api, field_manager=FIELD_MANAGER), namespace=namespace, on_deleted=on_shard_deleted
        ),
    )


class Reconciler:
    """The tenant, status and settlement controllers on one runtime, behind one leader gate."""

    def __init__(
        self,
        api: ApiClient | None,
        *,
        namespace: str,
        identity: str,
        lease_seconds: float = 15.0,
        resync_seconds: float = 300.0,
        workers: int = 2,
        certificates: CertificateManager | None = None,
        certificate_check_seconds: float = 30.0,
        doors: Doors | None = None,
        policy: PolicyConfig | None = None,
        kueue: bool = False,
        pacing: Pacing = PACING,
    ):
        """`doors` replaces the connections made from `api` (tests pass fakes); `policy`: see
        `PolicyConfig`; `kueue`: Kueue is installed, and each tenant gets its queues
        (rbac/queues.py); `pacing`: see `Pacing`."""
        self.policy = policy or PolicyConfig()
        self.kueue = kueue
        # The queues first: the doors and the controllers hand each other's work to them.
        settle_queue, status_queue = pacing.queues()
        self.pacing = pacing
        if doors is None:
            assert api is not None, "an API client or the doors"
            doors = connect(
                api,
                namespace=namespace,
                identity=identity,
                lease_seconds=lease_seconds,
                # Late-bound (noqa): the settlement controller is built below, before any event.
                on_unsettled=lambda tenant: self.settlement.ledger_holds_reservations(tenant),  # noqa: PLW0108
                on_shard_deleted=settle_queue.add,
            )
        self.doors = doors
        self.kube, self.leader = doors.kube, doors.leader
        self.ledgers, self.settled = doors.ledgers, doors.settled
        self.cache = ObjectCache()
        self.gate = LeaderGate(is_leader=lambda: self.leader.is_leader, is_synced=lambda: self.is_synced)
        self._controllers(self.policy.gpu_counting, settle_queue, status_queue)
        self._wire()
        self._stop = threading.Event()
        self._workers = [
            Workers(name, queue, handle, gate=self.gate, stop=self._stop, count=workers, on_lost_lease=lost)
            for name, queue, handle, lost in (
                ("reconcile", self.tenants.queue, self.tenants.handle, self.tenants.on_lost_lease),
                ("settle", self.settlement.queue, self.settlement.handle, lambda: None),
                ("status", self.status.queue, self.status.handle, lambda: None),
            )
        ]
        self.periodic = PeriodicTasks(
            self._periodic_tasks(resync_seconds, certificates, certificate_check_seconds),
            gate=self.gate,
            stop=self._stop,
        )

    def _controllers(
        self, gpu_counting: GpuCounting, settle_queue: WorkQueue, status_queue: WorkQueue
    ) -> None:
        """The tenant, settlement and status controllers; the first two queue the status, and a
        settlement the tenant's provisioning when its pods' holdings outside Kueue changed."""
        events = TenantEvents(self.kube, self.cache)
        self.settlement = SettlementController(
            self.kube,
            self.cache,
            self.ledgers,
            self.settled,
            gate=self.gate,
            events=events,
            gpu_counting=gpu_counting,
            # Late-bound: the routes are made once the controllers they route to are.
            on_settled=lambda tenant: self.queue_routes.on_settled(tenant),  # noqa: PLW0108
            queue=settle_queue,
            limit_defaults=self.policy.limit_defaults,
        )
        nodes = NodeIndex(gpu_counting, on_changed=lambda: self.queue_routes.on_nodes_changed())  # noqa: PLW0108
        holdings = QueueHoldings(self.cache, self.settlement.pods, nodes, self.settlement.claims.allocations)
        self.tenants = TenantController(
            self.kube,
            self.cache,
            gate=self.gate,
            events=events,
            on_provisioned=status_queue.add,
            limit_defaults=self.policy.limit_defaults,
            kueue=self.kueue,
            held_outside_queue=holdings.of,
            queue_config=self.policy.queue_config,
            gpu_model_label=gpu_counting.gpu_model_label,
            metadata_addresses=self.policy.metadata_addresses,
        )
        self.status = TenantStatusController(
            self.kube,
            self.cache,
            self.ledgers,
            self.settlement.pods,
            gate=self.gate,
            provisioned_generation=self.tenants.provisioned_generation,
            queue=status_queue,
            kueue=self.kueue,
            gpu_counting=gpu_counting,
            nodes=nodes,
        )
        self.queue_routes = QueueRoutes(self.cache, self.tenants, self.status)
        self.backstop = BackstopRecount(
            self.kube, self.cache, self.settlement.pods.in_namespaces, events=events
        )
        queues = {
            Queue.PROVISIONING: self.tenants.queue,
            Queue.SETTLEMENT: self.settlement.queue,
            Queue.STATUS: self.status.queue,
        }
        self.intake = EventIntake(self.cache, queues, self.queue_routes)

    def _wire(self) -> None:
        """Who hears of what: the reflectors of Tenants, Namespaces and managed objects enqueue
        provisioning; pods (like ledgers and settled-pods shards, see `connect`) only settlement."""
        self.leader.on_elected = self.intake.enqueue_all
        managed, pods, intake = f"{MANAGED_BY_LABEL}={MANAGED_BY}", self.settlement.pods, self.intake
        self.reflectors = [
            intake.reflector(self.kube, TENANT, None),
            intake.reflector(self.kube, NAMESPACE, None),
            *[intake.reflector(self.kube, kind, managed) for kind in self.tenants.kinds],
            # With Kueue, its Workloads: what each tenant has queued (its status).
            *([intake.reflector(self.kube, WORKLOAD, None)] if self.kueue else []),
            Reflector(
                "pods",
                self.kube.api,
                self.kube.lister(POD),
                on_list=pods.on_list,
                on_event=pods.on_event,
                batch_seconds=self.pacing.watch_batch_seconds,
            ),
        ]
        # Not part of readiness: what the scheduler allocated to claims (the settlement's truth for
        # DRA GPUs; a cluster that does not serve resource.k8s.io/v1 has no claims to count), and
        # what the nodes of each tenant's pools hold (its status; statuses go on without it).
        self.optional_reflectors = [
            Reflector(
                name,
                self.kube.api,
                self.kube.lister(kind),
                on_list=index.on_list,
                on_event=index.on_event,
                batch_seconds=self.pacing.watch_batch_seconds,
            )
            for name, kind, index in (
                ("resourceclaims", RESOURCE_CLAIM, self.settlement.claims),
                ("nodes", NODE, self.status.nodes),
            )
        ]

    def _periodic_tasks(
        self, resync_seconds: float, certificates: CertificateManager | None, certificate_check_seconds: float
    ) -> list[PeriodicTask]:
        tasks = [
            PeriodicTask("resync", resync_seconds, self.intake.enqueue_all, first_after=resync_seconds),
            PeriodicTask(
                "reservation-sweep",
                LEDGER_SWEEP_SECONDS,
                self.settlement.enqueue_pending_reservations,
                first_after=LEDGER_SWEEP_SECONDS,
            ),
            PeriodicTask("gpu-backstop-recount", BACKSTOP_SWEEP_SECONDS, self.backstop.sweep),
        ]
        if certificates is not None:
            tasks.append(rotation_task(certificates, every_seconds=certificate_check_seconds))
        return tasks

    def observe(self, kind: Kind, event: str, obj: Object) -> None:
        """A reflector's watch event about `obj` (the intake's; tests feed events here)."""
        self.intake.observe(kind, event, obj)

    def enqueue_all(self) -> None:
        """Every tenant's provisioning and settlement (on election and at each resync)."""
        self.intake.enqueue_all()

    # -- life -------------------------------------------------------------------------------------

    @property
    def queue(self) -> WorkQueue:
        """The provisioning queue (for benchmarks: drained once every tenant is reconciled)."""
        return self.tenants.queue

    @property
    def reconciled(self) -> int:
        """Tenants reconciled since start (for benchmarks and tests)."""
        return self.tenants.reconciled

    @property
    def is_synced(self) -> bool:
        return (
            self.ledgers.is_synced
            and self.settled.is_synced
            and all(r.has_synced.is_set() for r in self.reflectors)
        )

    def start(self) -> None:
        self.ledgers.start()
        self.settled.start()
        for reflector in [*self.reflectors, *self.optional_reflectors]:
            reflector.start()
        self.leader.start()
        self.start_workers()

    def start_workers(self) -> None:
        """The workers and the periodic tasks (`start` also starts the watches and the election)."""
        for workers in self._workers:
            workers.start()
        self.periodic.start()

    def stop(self) -> None:
        self._stop.set()
        self.leader.stop()
        for reflector in [*self.reflectors, *self.optional_reflectors]:
            reflector.stop()
        self.ledgers.stop()
        self.settled.stop()
        self.stop_workers()

    def stop_workers(self) -> None:
        self._stop.set()
        for workers in self._workers:
            workers.join(timeout=5)
        self.periodic.join(timeout=5)
