"""Pure: settling one tenant's GPU reservations against the pods the reconciler sees.

The settlement controller (rbac/settlement_controller.py) gathers the facts (the ledger, the settled
pods, the pods its watch shows, the pods it had to read from the API, the GPU devices the scheduler
allocated to the claims reserved for each pod) and writes the result; what to
write is decided here, with no client and no clock of its own. The ledger arithmetic itself (which
reservation settles, expires or stays) is `ledger.settle`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace

from labgate.core.gpu_amount import sum_of
from labgate.gpu_accounting.claim_allocations import AllocatedDevices, allocated_amount, at_least
from labgate.gpu_accounting.demand import UNSPECIFIED_MODEL
from labgate.gpu_accounting.ledger import GpuAmount, Ledger, settle
from labgate.gpu_accounting.pod_requests import tenant_usage


@dataclass(frozen=True)
class PodFacts:
    """What the reconciler keeps of one pod (by uid): where it is, its phase, the GPUs its spec asks
    (claims aside), and the model of its whole GPUs (for claims of a class mapped to no model)."""

    namespace: str
    name: str
    phase: str
    gpus: GpuAmount
    is_preemptible: bool
    is_scheduled: bool = True  # spec.nodeName is set: the scheduler bound it
    # Behind Kueue's admission gate: it cannot be scheduled and holds no GPUs (its reservation is
    # made when the gate is removed; pod_gpus.is_behind_admission_gate).
    is_gated: bool = False
    # cpu (millicores), memory (bytes), pods (1): what it asks (labgate.gpu_accounting.pod_requests)
    requests: Mapping[str, int] = field(default_factory=dict)
    whole_model: str = UNSPECIFIED_MODEL
    node: str = ""  # spec.nodeName
    # The uid of its controller (ownerReferences, controller: true), "" for a bare pod: whether Kueue
    # admitted it (rbac/outside_queue.py).
    controller_uid: str = ""


def held_gpus(
    tenant_pods: Mapping[str, PodFacts], allocations: Mapping[str, tuple[AllocatedDevices, ...]]
) -> dict[str, GpuAmount]:
    """What each pod with allocated claims holds: its spec's GPUs plus the devices the scheduler
    allocated to its claims (the truth, whatever the claims asked when the pod was admitted)."""
    return {
        uid: facts.gpus + allocated_amount(allocations[uid], facts.whole_model)
        for uid, facts in tenant_pods.items()
        if uid in allocations
    }


@dataclass(frozen=True)
class Settlement:
    """One pass over a tenant: the ledger and settled pods to write, and the pods recorded from their
    specs because they had neither a record nor a reservation."""

    ledger: Ledger
    settled: dict[str, GpuAmount]
    unrecorded: dict[str, GpuAmount]
    is_settled_changed: bool
    # What the tenant's live pods ask (Ledger.workloads), for the tenant-quota rule.
    workloads: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PodAddress:
    """A pod to read from the API: the watch does not show it, but its reservation has expired."""

    uid: str
    namespace: str
    name: str


def reserved_uids(ledger: Ledger) -> set[str]:
    """The uids of the pods the ledger holds reservations for."""
    return set(ledger.reservations)


def uids_to_watch(ledger: Ledger, settled_pods: Mapping[str, GpuAmount]) -> set[str]:
    """The pods whose phase decides the settlement: those reserved and those settled."""
    return reserved_uids(ledger) | set(settled_pods)


def expired_unseen(ledger: Ledger, seen: Collection[str], *, now: float) -> list[PodAddress]:
    """Pods of expired reservations that the watch does not show: the watch may lag, and a
    reservation must never be dropped while its pod exists, so these are read from the API."""
    found = []
    for uid, reservation in ledger.reservations.items():
        if uid in seen or reservation.expires > now or "/" not in reservation.pod:
            continue
        namespace, name = reservation.pod.split("/", 1)
        found.append(PodAddress(uid=uid, namespace=namespace, name=name))
    return found


def unrecorded(
    ledger: Ledger, settled_pods: Mapping[str, GpuAmount], tenant_pods: Mapping[str, PodFacts]
) -> dict[str, GpuAmount]:
    """The tenant's live GPU pods with neither a settled record nor a reservation, counted from
    their specs (preemptible pods are never counted). A pod seen before the ledger write that
    reserved it is counted twice for an instant at most: the ledger's compare-and-swap makes the
    next pass see the reservation."""
    reserved = reserved_uids(ledger)
    return {
        uid: facts.gpus
        for uid, facts in tenant_pods.items()
        if facts.gpus.total > 0
        and not facts.is_preemptible
        and not facts.is_gated
        and uid not in settled_pods
        and uid not in reserved
    }


def settle_tenant(
    ledger: Ledger,
    settled_pods: dict[str, GpuAmount],
    *,
    seen: Mapping[str, PodFacts],
    tenant_pods: Mapping[str, PodFacts],
    looked_up: Mapping[str, str],
    gone_pod_uids: Collection[str],
    now: float,
    allocations: Mapping[str, tuple[AllocatedDevices, ...]] | None = None,
) -> Settlement:
    """Settle a tenant. `seen`: the watched pods among those reserved or settled (any namespace);
    `tenant_pods`: the watched pods in the tenant's namespaces; `looked_up`: phases read from the API
    of pods the watch did not show (see `expired_unseen`); `gone_pod_uids`: pods seen deleted;
    `allocations`: the GPU devices allocated to the claims reserved for each pod, by uid. A settled
    pod's record is never below what it holds (its spec's GPUs plus its allocated devices): the
    count that decides is the count the cluster allocated."""
    held = held_gpus(tenant_pods, allocations or {})
    as_held = {
        uid: replace(facts, gpus=held[uid]) if uid in held else facts for uid, facts in tenant_pods.items()
    }
    found = unrecorded(ledger, settled_pods, as_held)
    phases = {uid: facts.phase for uid, facts in seen.items()}
    phases.update(looked_up)
    phases.update({uid: tenant_pods[uid].phase for uid in found})
    gated = {uid for uid, facts in (*seen.items(), *tenant_pods.items()) if facts.is_gated}
    updated, settled = settle(
        ledger,
        settled_pods,
        pod_phases=phases,
        now=now,
        gone_pod_uids=gone_pod_uids,
        unrecorded=found,
        gated=gated,
    )
    if held:
        settled = {uid: at_least(gpus, held[uid]) if uid in held else gpus for uid, gpus in settled.items()}
        updated = updated.model_copy(update={"settled": sum_of(settled.values())})
    return Settlement(
        ledger=updated,
        settled=settled,
        unrecorded=found,
        is_settled_changed=settled != settled_pods,
        workloads=tenant_usage((facts.phase, facts.requests) for facts in tenant_pods.values()),
    )


def recounted(settlement: Settlement) -> list[str]:
    """The unrecorded pods that the settlement records (the ones still running)."""
    return [uid for uid in settlement.unrecorded if uid in settlement.settled]


def recount_message(names: Iterable[str], *, pods: int, gpus: int, tenant: str) -> str:
    """The GpuUsageRecounted Event's text: how many pods and GPUs, and the first five pods by name."""
    shown_names = sorted(names)
    shown = ", ".join(shown_names[:5]) + (f" and {len(shown_names) - 5} more" if len(shown_names) > 5 else "")
    return (
        f"counted {pods} running GPU pods ({gpus} GPUs) from their specs: they had no record in "
        f"the settled-pods store (labgate-gpu-settled.{tenant}.*) and no reservation: {shown}"
    )
