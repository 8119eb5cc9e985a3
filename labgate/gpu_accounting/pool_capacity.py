"""What the nodes of a tenant's pools can ever hold, per GPU model (pure).

A quota the pools cannot hold is a promise no pod can collect: pods beyond it wait for a node that
never comes, and a pod asking more GPUs than the largest node has is never scheduled. The reconciler
summarises the nodes it watches (`node_gpus`), sums them over a tenant's pools (`pool_capacity`),
writes that into the Tenant's status (status.gpu.pools) with a condition (`quota_condition`), and the
policies read it back: a Tenant update warns (tenant-quota-beyond-pools), a GPU refusal's Fix names
the largest node (gpu-quota).

Only whole GPUs of a model the node says (its `gpu_model_label`) count; a node with GPUs of no
model, a pool selecting by nothing, or no pools at all leave labgate unable to tell (None): no
condition, no warning, the Fix as without nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, TypeGuard

from labgate.core.tenant import NodePool, Tenant
from labgate.gpu_accounting.demand import GpuCounting, quantity

QUOTA_CONDITION = "QuotaFitsPools"


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """One node as the capacity needs it: its labels, its GPU model ("" unknown), its whole GPUs."""

    name: str
    labels: Mapping[str, str]
    model: str
    gpus: int


class ModelCapacityDocument(TypedDict):
    """One model's capacity in its one spelling: status.gpu.pools[model], and the policies'
    input.gpu_pools[model] (read back from that status) and input.tenant_pool_gpus[model] (read live)."""

    gpus: int
    nodes: int
    largestNode: int


# model -> its capacity (status.gpu.pools, input.gpu_pools, input.tenant_pool_gpus).
PoolCapacityDocument = dict[str, ModelCapacityDocument]


def _is_count(value: object) -> TypeGuard[int]:
    """A positive int (a bool is not a count)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


@dataclass(frozen=True, slots=True)
class ModelCapacity:
    """Of one model, on the nodes of a tenant's pools: all their GPUs, how many nodes, the largest."""

    gpus: int
    nodes: int
    largest_node: int

    def document(self) -> ModelCapacityDocument:
        """As status.gpu.pools[model] says it."""
        return {"gpus": self.gpus, "nodes": self.nodes, "largestNode": self.largest_node}

    @classmethod
    def from_document(cls, held: object) -> ModelCapacity | None:
        """A status.gpu.pools[model] as `document` writes it; None unless its three numbers are
        positive ints (a status edited by hand, or of another version, says nothing)."""
        if not isinstance(held, Mapping):
            return None
        gpus, nodes, largest = held.get("gpus"), held.get("nodes"), held.get("largestNode")
        if _is_count(gpus) and _is_count(nodes) and _is_count(largest):
            return cls(gpus=gpus, nodes=nodes, largest_node=largest)
        return None


@dataclass(frozen=True, slots=True)
class Shortfall:
    """A model whose quota is more than the pools' nodes hold."""

    model: str
    quota: int
    capacity: ModelCapacity | None  # None: no node of the pools has that model


def node_gpus(node: Mapping[str, Any], counting: GpuCounting) -> NodeGpus | None:
    """The node's whole GPUs (allocatable, every counted resource) and model; None without any."""
    metadata = node.get("metadata") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    gpus = int(sum(quantity(allocatable.get(resource)) for resource in counting.gpu_resources))
    if gpus <= 0:
        return None
    labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
    return NodeGpus(
        name=str(metadata.get("name", "")),
        labels=labels,
        model=labels.get(counting.gpu_model_label, ""),
        gpus=gpus,
    )


def _selects(pool: NodePool, node: NodeGpus) -> bool:
    return all(node.labels.get(key) == value for key, value in pool.node_selector.items())


def pool_capacity(pools: Sequence[NodePool], nodes: Iterable[NodeGpus]) -> dict[str, ModelCapacity] | None:
    """Per model, what the nodes some pool selects hold (each node once). None when labgate cannot
    tell: no pools, a pool without a nodeSelector (any node), or a node of the pools without a model."""
    if not pools or any(not pool.node_selector for pool in pools):
        return None
    by_model: dict[str, list[int]] = {}
    for node in nodes:
        if any(_selects(pool, node) for pool in pools):
            if not node.model:
                return None
            by_model.setdefault(node.model, []).append(node.gpus)
    return {
        model: ModelCapacity(gpus=sum(sizes), nodes=len(sizes), largest_node=max(sizes))
        for model, sizes in sorted(by_model.items())
    }


def shortfalls(
    tenant: Tenant, capacity: Mapping[str, ModelCapacity], counting: GpuCounting
) -> list[Shortfall]:
    """The whole-GPU models whose quota (spec.gpu.models) is more than the pools' nodes hold, by name."""
    return [
        Shortfall(model=model, quota=quota, capacity=capacity.get(model))
        for model, quota in sorted(tenant.spec.gpu.models.items())
        if not counting.is_mig_model(model)
        if quota > (capacity[model].gpus if model in capacity else 0)
    ]


def shortfall_text(shortfall: Shortfall) -> str:
    """`h100: quota 24, its pools' nodes hold 16 (2 nodes, the largest 8)`."""
    held = shortfall.capacity
    nodes = (
        f"{held.gpus} ({held.nodes} node{'s' if held.nodes != 1 else ''}, the largest {held.largest_node})"
        if held is not None
        else "none"
    )
    return f"{shortfall.model}: quota {shortfall.quota}, its pools' nodes hold {nodes}"


def quota_condition(
    tenant: Tenant, capacity: Mapping[str, ModelCapacity], counting: GpuCounting
) -> dict[str, Any]:
    """QuotaFitsPools (without its lastTransitionTime): False, naming each model whose quota the
    pools' nodes cannot hold; True when they hold every model's."""
    short = shortfalls(tenant, capacity, counting)
    return {
        "type": QUOTA_CONDITION,
        "status": "False" if short else "True",
        "observedGeneration": tenant.generation,
        "reason": "QuotaBeyondPools" if short else "PoolsHoldQuota",
        "message": "; ".join(shortfall_text(s) for s in short)
        if short
        else "the nodes of its pools hold every model's quota",
    }


def capacity_document(capacity: Mapping[str, ModelCapacity]) -> PoolCapacityDocument:
    """status.gpu.pools: model -> {gpus, nodes, largestNode}."""
    return {model: held.document() for model, held in capacity.items()}


def capacity_from_document(pools: Mapping[str, Any]) -> dict[str, ModelCapacity]:
    """status.gpu.pools read back (`capacity_document`'s inverse): the models whose numbers are
    positive ints (`ModelCapacity.from_document`); the others are left out."""
    read = ((str(model), ModelCapacity.from_document(held)) for model, held in pools.items())
    return {model: capacity for model, capacity in read if capacity is not None}
