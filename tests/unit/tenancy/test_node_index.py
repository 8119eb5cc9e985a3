"""The reconciler's summary of the GPU nodes: what a tenant's pools hold, and which node events matter
(issue 22 item 6)."""

from __future__ import annotations

from typing import Any

from labgate.core.tenant import Tenant
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.pool_capacity import ModelCapacity
from rbac.node_index import NodeIndex


def node(name: str, gpus: int, *, pool: str = "vision-spot", ready: str = "True") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"labgate.io/pool": pool, "nvidia.com/gpu.product": "h100"}},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


VISION = Tenant.from_object(
    {
        "metadata": {"name": "vision"},
        "spec": {
            "placement": {"nodePools": [{"name": "spot", "nodeSelector": {"labgate.io/pool": "vision-spot"}}]}
        },
    }
)


def test_only_a_change_of_gpus_or_labels_asks_for_the_statuses() -> None:
    changes: list[int] = []
    index = NodeIndex(GpuCounting(), on_changed=lambda: changes.append(1))
    assert index.capacity_of(VISION) is None  # not listed yet: unknown, not empty
    index.on_list([node("a", 8), node("b", 8), node("cpu", 0)])
    assert index.capacity_of(VISION) == {"h100": ModelCapacity(gpus=16, nodes=2, largest_node=8)}
    assert len(changes) == 1
    index.on_event("MODIFIED", node("a", 8, ready="False"))  # the kubelet's status: nothing of GPUs
    index.on_event("MODIFIED", node("cpu", 0, ready="False"))
    index.on_list([node("a", 8), node("b", 8)])  # a relist of the same nodes
    assert len(changes) == 1
    index.on_event("ADDED", node("c", 4))
    assert index.capacity_of(VISION) == {"h100": ModelCapacity(gpus=20, nodes=3, largest_node=8)}
    index.on_event("MODIFIED", node("c", 4, pool="speech"))  # relabelled into another tenant's pool
    index.on_event("DELETED", node("b", 8))
    assert index.capacity_of(VISION) == {"h100": ModelCapacity(gpus=8, nodes=1, largest_node=8)}
    assert len(changes) == 4
