"""The GPUs a tenant's pods hold outside Kueue (pure), taken off its ClusterQueue's GPU quota.

The GPUs a tenant's pods hold that Kueue did not admit (pure: plain facts in, a sum out), which the
reconciler takes off its ClusterQueue's GPU quota (rbac/queues.py), so that Kueue admits only what
is free.

Such pods ran before the tenant became Kueue-managed (a Deployment's, a bare pod's), or run beside
Kueue in a tenant it does not manage: the quota ledger counts them, Kueue's ClusterQueue does not.
A pod is Kueue's when its controller (a Job, a JobSet's or training kind's pod owner) or the pod
itself (Kueue's pod integration, a pod group) owns a Workload: Kueue makes the Workload before it
lets any pod of it be created, and counts it in the ClusterQueue while admitted. The Workload's
owner, not a label, is the test: `kueue.x-k8s.io/podset` (which Kueue v0.17 puts on the pods of
every pod set it starts) is a label a member can write on a Deployment's template.

A live pod holds its GPUs (its spec's plus what the scheduler allocated to its claims) from its
creation (labgate's reservation) until it finishes; a pod behind Kueue's admission gate holds none.
Where it is decides the model: the node's GPU model once bound, else the model its spec asks; a pod
of no known model (on a node the reconciler does not know, or asking no model) is counted against
every model, the safe way to be wrong.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from labgate.gpu_accounting.claim_allocations import AllocatedDevices
from labgate.gpu_accounting.demand import UNSPECIFIED_MODEL
from labgate.gpu_accounting.ledger import FINISHED_PHASES
from labgate.gpu_accounting.settlement import PodFacts, held_gpus


@dataclass(frozen=True)
class HeldOutsideQueue:
    """What a tenant's pods hold outside Kueue: in all, per GPU model, and of no known model."""

    total: int = 0
    by_model: Mapping[str, int] = field(default_factory=dict)
    unplaced: int = 0  # of no model known: counted against every model
    pods: tuple[str, ...] = ()  # "namespace/name" of each, sorted

    def of_model(self, model: str) -> int:
        """What counts against a quota of `model`."""
        return self.by_model.get(model, 0) + self.unplaced


NOTHING_HELD = HeldOutsideQueue()


def workload_owner_uids(workloads: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The uids of every object that owns one of `workloads` (Kueue's Workloads): the Jobs and
    training jobs Kueue queues, and the pods of its pod integration."""
    return frozenset(
        str(owner["uid"])
        for workload in workloads
        for owner in (workload.get("metadata") or {}).get("ownerReferences") or []
        if owner.get("uid")
    )


def live_gpu_pods(
    pods: Mapping[str, PodFacts], allocations: Mapping[str, tuple[AllocatedDevices, ...]]
) -> dict[str, PodFacts]:
    """The pods (by uid) that may hold GPUs now, whoever admitted them: not finished, not behind
    Kueue's gate, with GPUs in their spec or claims allocated to them."""
    return {
        uid: f
        for uid, f in pods.items()
        if f.phase not in FINISHED_PHASES and not f.is_gated and (f.gpus.total > 0 or uid in allocations)
    }


def is_kueues(uid: str, facts: PodFacts, workload_owners: frozenset[str]) -> bool:
    """Kueue counts this pod: it, or its controller, owns a Workload."""
    return uid in workload_owners or (bool(facts.controller_uid) and facts.controller_uid in workload_owners)


def _model(facts: PodFacts, held_models: Mapping[str, int], node_models: Mapping[str, str] | None) -> str:
    """The model a pod's GPUs are of ("" when unknown)."""
    if facts.node:
        return "" if node_models is None else node_models.get(facts.node, "")
    asked = [m for m, count in held_models.items() if count and m != UNSPECIFIED_MODEL]
    return asked[0] if len(asked) == 1 else ""


def held_outside_queue(
    pods: Mapping[str, PodFacts],
    *,
    workload_owners: frozenset[str],
    node_models: Mapping[str, str] | None,
    allocations: Mapping[str, tuple[AllocatedDevices, ...]],
) -> HeldOutsideQueue:
    """What the tenant's `pods` (by uid) hold that Kueue did not admit. `node_models`: each GPU
    node's model ("" none), None when the nodes are not known yet; `allocations`: the devices the
    scheduler allocated to each pod's claims."""
    claimed = held_gpus(pods, allocations)
    total, unplaced, by_model, names = 0, 0, dict[str, int](), []
    for uid, facts in live_gpu_pods(pods, allocations).items():
        held = claimed.get(uid, facts.gpus)
        if held.total <= 0 or is_kueues(uid, facts, workload_owners):
            continue
        total += held.total
        names.append(f"{facts.namespace}/{facts.name}")
        if model := _model(facts, held.by_model, node_models):
            by_model[model] = by_model.get(model, 0) + held.total
        else:
            unplaced += held.total
    return HeldOutsideQueue(total=total, by_model=by_model, unplaced=unplaced, pods=tuple(sorted(names)))
