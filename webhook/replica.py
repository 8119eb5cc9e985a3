"""One webhook replica, composed in one place: read `build_replica` to see what it is made of.

`build_replica` constructs every part with its options and hands each its collaborators: the doors
to outside systems (the Kubernetes API, OPA, the OCI registries), the watch-fed caches (each handed
its client), the policy sync with its Events, the PolicyReports, the decision log, and the admission
rooms (`admission_server`: the evaluation door, decision reuse with the version of what OPA holds,
composed before it is built, the ledger sums, the reservations, the fact gatherer and the thin
server that takes a request through them). No part builds its own client and none is patched after
construction. `Replica` starts what it owns in order and stops it in reverse.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Hashable
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Protocol

from labgate.core.kube import KubeApi, api_client
from labgate.core.metrics import FACTS_AGE
from labgate.gpu_accounting.ledger import RESERVATION_TTL_SECONDS
from labgate.gpu_accounting.ledger_store import LEDGER_WRITERS, LedgerCache, LedgerStore
from webhook.claims import ClaimFacts
from webhook.decision_log import DecisionLog
from webhook.decision_reuse import DecisionReuse
from webhook.evaluation import DecisionSource, Evaluator
from webhook.facts import (
    ClaimSource,
    FactGatherer,
    ImageFactSource,
    InventoryState,
    PoolNodeFacts,
    ScaledWorkloadFacts,
    SecretFacts,
    VolumeFacts,
)
from webhook.inventory import InventorySync, PersistentVolumes, RestrictedSecrets, empty_snapshot
from webhook.inventory_push import InventoryPush
from webhook.ledger_sums import LedgerAccess, LedgerSums
from webhook.opa_management import InventoryStore, PolicyStore
from webhook.pod_templates import BUILTIN_WORKLOAD_KINDS, WorkloadKind
from webhook.policy_engine import PolicyEngine
from webhook.policy_events import PolicyEvents
from webhook.policy_reports import AdmissionReports, KubeReportStore
from webhook.policy_sync import PolicyStatus, PolicySync
from webhook.pool_nodes import PoolNodes, gpu_counting
from webhook.provenance.admission import ImageGatherer
from webhook.provenance.facts import ImageFacts
from webhook.provenance.registry import RegistryClient
from webhook.provenance.settings import ProvenanceSettings, get_provenance_settings
from webhook.read_shares import READS_PER_TENANT, ReadShares
from webhook.references import DEFAULT_MAX_REFERENCES
from webhook.reservations import GpuReservations
from webhook.scaled_workloads import ScaledWorkloads
from webhook.serving import AdmissionServer, UsageRecountSource, WatchedFacts, count_findings
from webhook.settings import Settings
from webhook.tenant_facts import TenantFacts, TenantRequests, TenantStatusSource
from webhook.tenant_status_facts import TenantStatusFacts
from webhook.usage_recount import UsageRecount

# Every write the webhook makes goes under this field manager (ledgers, Events, PolicyReports).
FIELD_MANAGER = "labgate-webhook"
# Threads for the blocking calls (API read-throughs): the loop's default pool (cores + 4) would queue
# them behind each other when many pods arrive at once. Ledger writes have threads of their own.
READ_THREADS = 32


@dataclass(frozen=True)
class AdmissionOptions:
    """The admission rooms' options. These defaults are the rooms' own (no decision reuse, no bound
    on the facts' age); a replica takes its options from its settings (`of`)."""

    workload_kinds: tuple[WorkloadKind, ...] = BUILTIN_WORKLOAD_KINDS
    image_timeout: float = 1.0
    reservation_seconds: float = RESERVATION_TTL_SECONDS
    facts_max_age: float = float("inf")
    decision_reuse_seconds: float = 0.0
    max_references: int = DEFAULT_MAX_REFERENCES
    reads_per_tenant: int = READS_PER_TENANT

    @classmethod
    def of(
        cls, settings: Settings, kinds: tuple[WorkloadKind, ...], provenance: ProvenanceSettings
    ) -> AdmissionOptions:
        return cls(
            workload_kinds=kinds,
            image_timeout=provenance.registry_timeout_seconds,
            reservation_seconds=settings.reservation_seconds,
            facts_max_age=settings.facts_max_age_seconds,
            decision_reuse_seconds=settings.decision_reuse_seconds,
            max_references=settings.max_references_per_request,
        )


@dataclass(frozen=True)
class FactSources:
    """Where a request's facts come from. Watch-fed: the inventory, the ledgers, the restricted
    secrets, what the Tenants' statuses say (fed by the inventory's Tenant watch), and `age()`, how
    long ago the API last proved the stalest of them current. Read through:
    image facts, PersistentVolumes, DRA claims, a written Tenant's pools' nodes, a scaled workload,
    the tenant's GPU usage counted from its live pods. None: that fact is not gathered."""

    inventory: InventoryState
    ledgers: LedgerAccess | None = None
    secrets: SecretFacts | None = None
    age: Callable[[], float] | None = None
    images: ImageFactSource | None = None
    volumes: VolumeFacts | None = None
    claims: ClaimSource | None = None
    pool_nodes: PoolNodeFacts | None = None
    scaled_workloads: ScaledWorkloadFacts | None = None
    usage_recount: UsageRecountSource | None = None
    tenant_status: TenantStatusSource | None = None


def _no_version() -> Hashable:
    return None


def admission_server(
    engine: DecisionSource,
    sources: FactSources,
    options: AdmissionOptions = AdmissionOptions(),
    *,
    version: Callable[[], Hashable] = _no_version,
) -> AdmissionServer:
    """The admission rooms, each handed its collaborators, and the server that takes a request
    through them. `version()`: the version of what OPA holds; a reused decision is one made at the
    same version (webhook/decision_reuse.py)."""
    evaluator = Evaluator(engine, sources.inventory)
    ledgers = sources.ledgers
    # What the ledgers sum to, shared: the facts put the usage into the policy input, the
    # reservations' batches decide against it, a live count corrects it.
    sums = LedgerSums(ledgers) if ledgers is not None else None
    reservations = None
    if ledgers is not None and sums is not None:
        reservations = GpuReservations(
            ledgers,
            sums,
            evaluator,
            reservation_seconds=options.reservation_seconds,
            on_decided=count_findings,
        )
    facts = FactGatherer(
        inventory=sources.inventory,
        secrets=sources.secrets,
        tenant_facts=TenantFacts(
            gpu_usage=sums,
            tenant_status=sources.tenant_status,
            workload_usage=TenantRequests(ledgers) if ledgers is not None else None,
        ),
        workload_kinds=options.workload_kinds,
        images=sources.images,
        image_timeout=options.image_timeout,
        volumes=sources.volumes,
        claims=sources.claims,
        max_references=options.max_references,
        pool_nodes=sources.pool_nodes,
        scaled_workloads=sources.scaled_workloads,
        reads=ReadShares(options.reads_per_tenant),
    )
    watched = WatchedFacts(
        sources.inventory, ledgers, sources.secrets, age=sources.age, max_age=options.facts_max_age
    )
    return AdmissionServer(
        watched=watched,
        facts=facts,
        reuse=DecisionReuse(evaluator, seconds=options.decision_reuse_seconds, facts_version=version),
        evaluator=evaluator,
        reservations=reservations,
        usage_recount=sources.usage_recount,
    )


def reuse_version(
    facts: Callable[[], Hashable] | None, policies: PolicySync | None
) -> Callable[[], Hashable]:
    """The version of what OPA holds, for decision reuse: the facts' version (the inventory's
    writes) and, when this replica loads the policies, their revision (a reused decision is one of
    the policies OPA serves now)."""
    if policies is None:
        return facts if facts is not None else _no_version

    def version() -> Hashable:
        status = policies.status
        return (facts() if facts is not None else None, status.revision, status.attempted)

    return version


def policy_sync(
    settings: Settings, on_change: Callable[[PolicyStatus, PolicyStatus], None] | None = None
) -> PolicySync | None:
    """What keeps OPA's policies equal to LABGATE_POLICY_DIR (webhook/policy_sync.py), when it is
    set; `on_change` hears of a refused policy and its fix (an Event, webhook/policy_events.py)."""
    if settings.policy_dir is None:
        return None
    return PolicySync(
        settings.policy_dir,
        PolicyStore(settings.opa_url),
        interval=settings.policy_poll_seconds,
        on_change=on_change,
    )


def open_decision_log(settings: Settings) -> DecisionLog | None:
    """The decision log and its writer thread, when one is asked for: one per run of the app (a
    stopped one takes no records)."""
    if settings.decision_log_file is None and not settings.decision_log_stdout:
        return None
    return DecisionLog(settings.decision_log_file, stdout=settings.decision_log_stdout)


def admission_reports(settings: Settings, kube: KubeApi) -> AdmissionReports | None:
    """The PolicyReports of admitted objects' warn and dry-run findings, when they are on."""
    if not settings.policy_reports:
        return None
    return AdmissionReports(
        KubeReportStore(kube),
        interval=settings.policy_report_interval_seconds,
        max_pending=settings.policy_report_max_pending,
    )


@dataclass(frozen=True)
class ClusterCaches:
    """The watch-fed caches of the cluster a replica keeps: the inventory and its push into OPA, what
    the Tenants' statuses say (kept aside from it, fed by its Tenant watch), the GPU ledgers, the
    restricted secrets."""

    inventory: InventorySync
    push: InventoryPush
    statuses: TenantStatusFacts
    ledgers: LedgerCache
    secrets: RestrictedSecrets

    @classmethod
    def of(cls, settings: Settings, kube: KubeApi, ledger_writers: Executor) -> ClusterCaches:
        watch_timeout = settings.watch_timeout_seconds
        statuses = TenantStatusFacts()
        push = InventoryPush(
            InventoryStore(settings.opa_url),
            empty_snapshot(
                platform_namespace=settings.namespace,
                kueue=settings.kueue,
                exempt_namespaces=tuple(settings.exempt_namespaces),
            ),
        )
        inventory = InventorySync(
            kube,
            push,
            watch_timeout_seconds=watch_timeout,
            kueue=settings.kueue,
            tenant_seen=statuses.remember_status,
        )
        ledgers = LedgerCache(
            LedgerStore(kube, namespace=settings.namespace),
            watch_timeout_seconds=watch_timeout,
            writers=ledger_writers,
        )
        secrets = RestrictedSecrets(kube, watch_timeout_seconds=watch_timeout)
        return cls(inventory, push, statuses, ledgers, secrets)

    def age(self) -> float:
        """Seconds since the API last proved the stalest of them current."""
        return max(self.inventory.age(), self.ledgers.age(), self.secrets.age())


def cluster_facts(
    settings: Settings,
    kube: KubeApi,
    caches: ClusterCaches,
    registry: RegistryClient,
    provenance: ProvenanceSettings,
) -> FactSources:
    """A replica's fact sources: its watch-fed caches, and the read-throughs, each handed `kube`."""
    # Which resources are GPUs: the policies' config, read once at start (defaults without a dir).
    counting = gpu_counting(settings.policy_dir)
    inventory, ledgers = caches.inventory, caches.ledgers

    def tenant_namespaces(tenant: str) -> list[str]:
        return inventory.snapshot.namespaces_of(tenant)

    return FactSources(
        inventory=inventory,
        ledgers=ledgers,
        secrets=caches.secrets,
        tenant_status=caches.statuses,
        age=caches.age,
        images=ImageGatherer(ImageFacts(registry, provenance), kube),
        volumes=PersistentVolumes(kube),
        claims=ClaimFacts(kube),
        pool_nodes=PoolNodes(kube, counting),
        scaled_workloads=ScaledWorkloads(kube),
        # Before a gpu-quota refusal stands: the usage counted from the live pods.
        usage_recount=UsageRecount(
            kube, ledgers.fresh, tenant_namespaces, counting, cached_ledger=ledgers.cached
        ),
    )


def build_replica(settings: Settings, kinds: tuple[WorkloadKind, ...]) -> Replica:
    """One webhook replica, every part constructed with its options and handed its collaborators;
    nothing is started (`Replica.start`)."""
    provenance = get_provenance_settings()
    # The doors. Events and PolicyReports go through a Kubernetes client of their own: their writes
    # never queue in front of, or share a connection with, what an admission reads.
    kube = KubeApi(api_client(settings.kubeconfig), field_manager=FIELD_MANAGER)
    reporting = KubeApi(api_client(settings.kubeconfig), field_manager=FIELD_MANAGER)
    engine = PolicyEngine(settings.opa_url, timeout=settings.opa_timeout_seconds)
    registry = RegistryClient(provenance)
    ledger_writers = ThreadPoolExecutor(max_workers=LEDGER_WRITERS, thread_name_prefix="gpu-ledger")
    caches = ClusterCaches.of(settings, kube, ledger_writers)
    events = PolicyEvents(
        reporting,
        namespace=settings.namespace,
        configmap=settings.policy_configmap,
        replica=socket.gethostname(),
    )
    policies = policy_sync(settings, on_change=events)
    server = admission_server(
        engine,
        cluster_facts(settings, kube, caches, registry, provenance),
        AdmissionOptions.of(settings, kinds, provenance),
        version=reuse_version(lambda: caches.push.writes, policies),
    )
    FACTS_AGE.set_function(caches.age)  # read at scrape time
    return Replica(
        server=server,
        engine=engine,
        decisions=open_decision_log(settings),
        registry=registry,
        ledger_writers=ledger_writers,
        reports=admission_reports(settings, reporting),
        policies=policies,
        # The push before the copy that feeds it; stopped in reverse order, after it.
        caches=(caches.push, caches.inventory, caches.ledgers, caches.secrets),
    )


class Engine(Protocol):
    """The policy engine as the replica holds it: asked by /readyz, closed at the end."""

    async def is_healthy(self) -> bool: ...

    async def close(self) -> None: ...


class Running(Protocol):
    """A part with threads of its own: started, then stopped."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


@dataclass
class Replica:
    """One webhook replica: the admission server and every part it owns. `start` starts them in the
    order of these fields; `stop` stops what was started, in reverse."""

    server: AdmissionServer
    engine: Engine
    decisions: DecisionLog | None = None
    registry: RegistryClient | None = None
    ledger_writers: Executor | None = None
    reports: AdmissionReports | None = None
    policies: PolicySync | None = None
    caches: tuple[Running, ...] = ()
    _started: AsyncExitStack = field(default_factory=AsyncExitStack, init=False, repr=False)

    def start(self) -> None:
        """Start every part; each one started is stopped by `stop`, even if a later one fails."""
        started = self._started
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=READ_THREADS))
        if self.decisions is not None:
            started.callback(self.decisions.close)  # opened when built
        started.push_async_callback(self.engine.close)
        if self.registry is not None:
            started.push_async_callback(self.registry.aclose)
        if self.ledger_writers is not None:
            # Shut down after the ledgers stop: a write under way completes (its reservation is
            # then in the ledger).
            started.callback(self.ledger_writers.shutdown, wait=True)
        for part in (self.reports, self.policies, *self.caches):
            if part is not None:
                part.start()
                started.callback(part.stop)

    async def stop(self) -> None:
        """Stop what `start` started, in reverse order."""
        await self._started.aclose()
