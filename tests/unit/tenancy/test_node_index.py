"""The reconciler's summary of the GPU nodes: what a tenant's pools hold, and which node events matter
(issue 22 item 6)."""

from __future__ import annotations

from typing import Any

from labgate.core.tenant import Tenant
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.pool_capacity import ModelCapacity
from rbac.node_index import NodeIndex


def node(
    name: str,
    gpus: int,
    *,
    pool: str = "vision-spot",
    ready: str = "True",
    heartbeat: str = "t0",
    taints: tuple[str, ...] = (),
    cordoned: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"labgate.io/pool": pool, "nvidia.com/gpu.product": "h100"}},
        "spec": {
            "taints": [{"key": key, "value": "x", "effect": "NoSchedule"} for key in taints],
            **({"unschedulable": True} if cordoned else {}),
        },
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat}],
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


def test_only_a_change_of_gpus_labels_or_taints_asks_for_the_statuses() -> None:
    changes: list[int] = []
    index = NodeIndex(GpuCounting(), on_changed=lambda: changes.append(1))
    assert index.capacity_of(VISION) is None  # not listed yet: unknown, not empty
    index.on_list([node("a", 8), node("b", 8), node("cpu", 0)])
    assert index.capacity_of(VISION) == {"h100": ModelCapacity(gpus=16, nodes=2, largest_node=8)}
    assert len(changes) == 1
    index.on_event("MODIFIED", node("a", 8, heartbeat="t1"))  # the kubelet's heartbeat: nothing changed
    index.on_event("MODIFIED", node("cpu", 0, heartbeat="t1"))
    index.on_list([node("a", 8), node("b", 8), node("cpu", 0)])  # a relist of the same nodes
    assert len(changes) == 1
    index.on_event("ADDED", node("c", 4))
    assert index.capacity_of(VISION) == {"h100": ModelCapacity(gpus=20, nodes=3, largest_node=8)}
    index.on_event("MODIFIED", node("c", 4, pool="speech"))  # relabelled into another tenant's pool
    index.on_event("DELETED", node("b", 8))
    assert index.capacity_of(VISION) == {"h100": ModelCapacity(gpus=8, nodes=1, largest_node=8)}
    assert len(changes) == 4


# Issue 28 item 5: where a pod without tolerations can land (status.nodes), from every node, GPU or not.
def test_every_nodes_taints_are_summarised_and_their_changes_ask_for_the_statuses() -> None:
    changes: list[int] = []
    index = NodeIndex(GpuCounting(), on_changed=lambda: changes.append(1))
    assert index.open_nodes() is None  # not listed yet: unknown, not "no node"
    index.on_list([node("a", 8, taints=("labgate.io/pool",)), node("b", 8, taints=("labgate.io/spot",))])
    assert index.open_nodes() == {
        "untainted": 0,
        "tainted": 2,
        "taintKeys": ["labgate.io/pool", "labgate.io/spot"],
    }
    index.on_event("ADDED", node("cpu", 0))  # an untainted node without GPUs counts too
    assert index.open_nodes() == {
        "untainted": 1,
        "tainted": 2,
        "taintKeys": ["labgate.io/pool", "labgate.io/spot"],
    }
    index.on_event("MODIFIED", node("cpu", 0, cordoned=True))  # cordoned: takes no pod
    assert index.open_nodes() == {
        "untainted": 0,
        "tainted": 2,
        "taintKeys": ["labgate.io/pool", "labgate.io/spot"],
    }
    index.on_event("MODIFIED", node("b", 8, ready="False"))  # not Ready: takes no pod either
    index.on_event("DELETED", node("cpu", 0))
    assert index.open_nodes() == {"untainted": 0, "tainted": 1, "taintKeys": ["labgate.io/pool"]}
    assert len(changes) == 5
