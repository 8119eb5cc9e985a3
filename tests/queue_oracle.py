"""The queue oracle: where Kueue manages a tenant, no pod skips the queue and its GPUs have one count.

The queue oracle: where Kueue manages a tenant, the queue cannot be skipped and the tenant's GPUs
have one count, judged from the API state alone.

Like tests/isolation_oracle.py, it reads only what the API holds (Tenants as declared, namespaces,
nodes, pods, Kueue's Workloads and ClusterQueues, events) and shares no code with labgate (no import
of cli, labgate, webhook or rbac; bound GPUs come from tests.cluster_truth, which follows the scheduler's
rules), so that a mistake in labgate cannot hide in the tests that check it. A tenant is Kueue's when
a ClusterQueue's namespaceSelector selects one of its namespaces. For every such tenant:

- queue: no bound pod of it that has not finished (nor is being deleted) belongs to a workload Kueue
  has not admitted. A pod whose controller owner has a Workload needs that Workload's quota
  reservation (condition QuotaReserved true); a Job's pod whose Job has no Workload skipped the
  queue; any other pod that holds GPUs (a Deployment's, StatefulSet's, DaemonSet's, a bare pod) runs
  outside any queue.
- one count: the GPUs bound on nodes, the GPUs its ClusterQueues reserve (status.flavorsReservation,
  else status.flavorsUsage) and labgate's count (the Tenant's status.gpu.used) are the same number.
  They move at different moments (Kueue reserves before the pods exist, labgate settles after they
  bind), so a caller polls until they agree and reports a disagreement that outlasts its bound.

And, for the objects a caller names, `failed_create_loops`: a controller refused to create their pods
(events of reason FailedCreate) again and again over longer than a bound, the loop that two enforcers
which disagree make (one admits a workload, the other refuses its pods).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tests.cluster_truth import (
    TENANT_LABEL,
    effective_gpu_request,
    holds_gpus,
    is_gpu_resource,
    node_models,
    tenant_gpus,
)

Json = Mapping[str, Any]

# The kinds of a state, as `kubectl get -o json` names them in each item.
KINDS = ("Tenant", "Namespace", "Node", "Pod", "Workload", "ClusterQueue")


@dataclass(frozen=True)
class QueueState:
    """What the API holds, as lists of objects in their wire form."""

    tenants: Sequence[Json]
    namespaces: Sequence[Json]
    nodes: Sequence[Json] = ()
    pods: Sequence[Json] = ()
    workloads: Sequence[Json] = ()
    cluster_queues: Sequence[Json] = ()


def collect(items_of: Callable[[str], Sequence[Json]]) -> QueueState:
    """The state from a lister: `items_of(kind)` returns every object of that kind (KINDS)."""
    return QueueState(
        tenants=items_of("Tenant"),
        namespaces=items_of("Namespace"),
        nodes=items_of("Node"),
        pods=items_of("Pod"),
        workloads=items_of("Workload"),
        cluster_queues=items_of("ClusterQueue"),
    )


def _meta(obj: Json) -> Json:
    return obj.get("metadata") or {}


def _name(obj: Json) -> str:
    return str(_meta(obj).get("name", ""))


def _namespace(obj: Json) -> str:
    return str(_meta(obj).get("namespace", ""))


def _labels(obj: Json) -> Mapping[str, str]:
    return _meta(obj).get("labels") or {}


def selects(selector: Json | None, labels: Mapping[str, str]) -> bool:
    """Whether a label selector matches `labels` (absent: nothing, as Kueue reads a ClusterQueue's
    namespaceSelector; empty: everything)."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        present = key in labels
        matched = {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }.get(str(operator), False)
        if not matched:
            return False
    return True


def namespace_tenants(state: QueueState) -> dict[str, str]:
    """namespace -> tenant, for the namespaces labelled for a Tenant that exists."""
    existing = {_name(t) for t in state.tenants}
    return {
        _name(ns): _labels(ns)[TENANT_LABEL]
        for ns in state.namespaces
        if _labels(ns).get(TENANT_LABEL) in existing
    }


def tenant_cluster_queues(state: QueueState) -> dict[str, list[Json]]:
    """tenant -> the ClusterQueues that select one of its namespaces (Kueue's tenants only)."""
    labels = {_name(ns): _labels(ns) for ns in state.namespaces}
    result: dict[str, list[Json]] = {}
    for ns, tenant in sorted(namespace_tenants(state).items()):
        for queue in state.cluster_queues:
            chosen = result.setdefault(tenant, [])
            if (
                selects((queue.get("spec") or {}).get("namespaceSelector"), labels[ns])
                and queue not in chosen
            ):
                chosen.append(queue)
    return {tenant: queues for tenant, queues in result.items() if queues}


def _quantity(value: Any) -> int:
    text = str(value)
    return int(float(text[:-1]) / 1000) if text.endswith("m") else int(float(text))


def reserved_gpus(queue: Json) -> int:
    """The GPUs a ClusterQueue has reserved for the workloads it admitted, over its flavors."""
    status = queue.get("status") or {}
    flavors = status.get("flavorsReservation") or status.get("flavorsUsage") or []
    return sum(
        _quantity(r.get("total", 0))
        for flavor in flavors
        for r in flavor.get("resources") or []
        if is_gpu_resource(str(r.get("name", "")))
    )


def _has_condition(obj: Json, kind: str) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == kind and c.get("status") == "True" for c in conditions)


def is_admitted(workload: Json) -> bool:
    """Kueue reserved quota for the workload (it may run)."""
    return _has_condition(workload, "QuotaReserved")


def _controller(obj: Json) -> Json | None:
    return next((r for r in _meta(obj).get("ownerReferences") or [] if r.get("controller")), None)


def _workloads_by_owner(state: QueueState) -> dict[str, Json]:
    """The uid of each object Kueue made a Workload for -> that Workload."""
    owners = {}
    for workload in state.workloads:
        owner = _controller(workload)
        if owner is not None:
            owners[str(owner.get("uid"))] = workload
    return owners


def _asked_gpus(pod: Json) -> int:
    return sum(effective_gpu_request(pod.get("spec") or {}).values())


def _unqueued_problem(pod: Json, workloads: Mapping[str, Json]) -> str | None:
    """Why this bound pod runs without Kueue's admission; None when Kueue admitted it (or it is a
    pod that needs no queue: one of no queued owner that holds no GPUs)."""
    owner = _controller(pod)
    workload = workloads.get(str(owner.get("uid"))) if owner is not None else None
    if workload is not None:
        if is_admitted(workload):
            return None
        return f'its Workload "{_name(workload)}" holds no quota reservation (not admitted by Kueue)'
    owner_text = f'{owner.get("kind")} "{owner.get("name")}"' if owner is not None else "no owner"
    if owner is not None and owner.get("kind") == "Job":
        return f"its owner {owner_text} has no Workload: it skipped the queue"
    gpus = _asked_gpus(pod)
    if gpus:
        return f"it holds {gpus} GPUs outside any queue (controller: {owner_text}, which Kueue queues no Workload for)"
    return None


def _unqueued(state: QueueState, tenants: Mapping[str, str], managed: set[str]) -> list[str]:
    workloads = _workloads_by_owner(state)
    found = []
    for pod in state.pods:
        tenant = tenants.get(_namespace(pod))
        spec = pod.get("spec") or {}
        if tenant not in managed or not spec.get("nodeName") or not holds_gpus(pod):
            continue
        if _meta(pod).get("deletionTimestamp"):
            continue  # going: what it held is judged by the count until it is gone
        problem = _unqueued_problem(pod, workloads)
        if problem is not None:
            found.append(
                f'pod {_namespace(pod)}/{_name(pod)} of tenant "{tenant}" is bound to node '
                f'"{spec["nodeName"]}", but {problem}'
            )
    return found


@dataclass(frozen=True)
class GpuCounts:
    """One tenant's GPUs as three parties count them."""

    bound: int  # bound on nodes, not finished (the scheduler's truth)
    reserved_by_kueue: int  # its ClusterQueues' reservations
    counted_by_labgate: int | None  # the Tenant's status.gpu.used (None: no status yet)

    def agree(self) -> bool:
        return self.bound == self.reserved_by_kueue == self.counted_by_labgate


def gpu_counts(state: QueueState) -> dict[str, GpuCounts]:
    """Per tenant Kueue manages, the three counts of its GPUs."""
    tenants = namespace_tenants(state)
    queues = tenant_cluster_queues(state)
    bound = tenant_gpus(state.pods, namespace_tenants=tenants, models=node_models(state.nodes))
    used = {_name(t): ((t.get("status") or {}).get("gpu") or {}).get("used") for t in state.tenants}
    result = {}
    for tenant, tenant_queues in queues.items():
        gpus = bound.get(tenant)
        held = 0 if gpus is None else gpus.bound_total + gpus.preemptible_bound_total
        counted = used.get(tenant)
        result[tenant] = GpuCounts(
            bound=held,
            reserved_by_kueue=sum(reserved_gpus(q) for q in tenant_queues),
            counted_by_labgate=None if counted is None else int(counted),
        )
    return result


def _disagreements(state: QueueState) -> list[str]:
    queues = tenant_cluster_queues(state)
    found = []
    for tenant, counts in sorted(gpu_counts(state).items()):
        if counts.agree():
            continue
        names = ", ".join(sorted(_name(q) for q in queues[tenant]))
        found.append(
            f'tenant "{tenant}" has {counts.bound} GPUs bound on nodes, {counts.reserved_by_kueue} '
            f"reserved by Kueue (ClusterQueue {names}) and {counts.counted_by_labgate} counted by labgate "
            "(status.gpu.used): three counts of what it holds"
        )
    return found


def violations(state: QueueState) -> list[str]:
    """Every queue violation the state shows, one sentence each naming the objects."""
    tenants = namespace_tenants(state)
    managed = set(tenant_cluster_queues(state))
    return [*_unqueued(state, tenants, managed), *_disagreements(state)]


# -- FailedCreate loops ------------------------------------------------------------------------------


def _time(text: Any) -> datetime | None:
    return datetime.fromisoformat(str(text)) if text else None


@dataclass(frozen=True)
class Refusals:
    """The FailedCreate events of one object: how many, from when to when, and the last message."""

    count: int
    first: datetime
    last: datetime
    message: str

    @property
    def seconds(self) -> float:
        return (self.last - self.first).total_seconds()


def refusals(
    events: Sequence[Json], *, namespace: str, is_mine: Callable[[Json], bool]
) -> dict[str, Refusals]:
    """kind/name -> its FailedCreate events, for the objects of `namespace` that `is_mine`
    (given each event's involvedObject) accepts."""
    found: dict[str, Refusals] = {}
    for event in events:
        involved = event.get("involvedObject") or {}
        if event.get("reason") != "FailedCreate" or involved.get("namespace") != namespace:
            continue
        if not is_mine(involved):
            continue
        series = event.get("series") or {}
        first = _time(event.get("firstTimestamp") or event.get("eventTime"))
        last = _time(event.get("lastTimestamp") or series.get("lastObservedTime") or event.get("eventTime"))
        if first is None or last is None:
            continue
        count = int(event.get("count") or series.get("count") or 1)
        key = f"{involved.get('kind')}/{involved.get('name')}"
        seen = found.get(key)
        if seen is not None:
            first, last, count = min(first, seen.first), max(last, seen.last), count + seen.count
        message = str(event.get("message", "")) if seen is None or last > seen.last else seen.message
        found[key] = Refusals(count=count, first=first, last=last, message=message)
    return found


def failed_create_loops(refused: Mapping[str, Refusals], *, bound_seconds: float) -> list[str]:
    """The objects whose controller was refused their pods again and again for longer than
    `bound_seconds`: a loop, not a refusal retried once while a count caught up."""
    return [
        f"{key} loops on FailedCreate: refused {r.count} times over {r.seconds:.0f}s; last: {r.message}"
        for key, r in sorted(refused.items())
        if r.count >= 2 and r.seconds > bound_seconds
    ]
