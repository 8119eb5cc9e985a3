"""What the nodes of a tenant's pools hold, and the quota they cannot (pure; issue 22 item 6)."""

from __future__ import annotations

from typing import Any

import pytest

from labgate.core.tenant import Tenant
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.pool_capacity import (
    ModelCapacity,
    NodeGpus,
    Shortfall,
    capacity_document,
    capacity_from_document,
    node_gpus,
    pool_capacity,
    quota_condition,
    shortfall_text,
    shortfalls,
)

COUNTING = GpuCounting()


def node(name: str, pool: str, model: str | None, gpus: Any) -> dict[str, Any]:
    labels = {"labgate.io/pool": pool, **({"nvidia.com/gpu.product": model} if model else {})}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "64", "nvidia.com/gpu": gpus}},
    }


def tenant(models: dict[str, int], pools: list[dict[str, Any]]) -> Tenant:
    return Tenant.from_object(
        {
            "metadata": {"name": "vision", "generation": 3},
            "spec": {"gpu": {"models": models}, "placement": {"nodePools": pools}},
        }
    )


SPOT = {"name": "h100-spot", "spot": True, "nodeSelector": {"labgate.io/pool": "h100-spot"}}
ON_DEMAND = {"name": "h100-od", "nodeSelector": {"labgate.io/pool": "h100-od"}}
NODES = [
    node("spot-0", "h100-spot", "h100", "8"),
    node("spot-1", "h100-spot", "h100", 8),
    node("od-0", "h100-od", "h100", "4"),
    node("theirs-0", "speech", "h100", "8"),  # another tenant's pool
    node("cpu-0", "h100-spot", None, "0"),  # no GPUs: not a GPU node at all
]


def summaries(nodes: list[dict[str, Any]]) -> list[NodeGpus]:
    return [n for o in nodes if (n := node_gpus(o, COUNTING)) is not None]


def test_a_node_is_its_labels_model_and_allocatable_gpus() -> None:
    assert node_gpus(NODES[0], COUNTING) == NodeGpus(
        name="spot-0",
        labels={"labgate.io/pool": "h100-spot", "nvidia.com/gpu.product": "h100"},
        model="h100",
        gpus=8,
    )
    assert node_gpus(NODES[4], COUNTING) is None
    assert node_gpus({"metadata": {"name": "bare"}}, COUNTING) is None


def test_the_pools_hold_the_gpus_of_the_nodes_they_select_once_each() -> None:
    vision = tenant({"h100": 16}, [SPOT, ON_DEMAND, {**SPOT, "name": "again"}])
    assert pool_capacity(vision.spec.placement.node_pools, summaries(NODES)) == {
        "h100": ModelCapacity(gpus=20, nodes=3, largest_node=8)
    }
    only_spot = tenant({"h100": 16}, [SPOT]).spec.placement.node_pools
    assert pool_capacity(only_spot, summaries(NODES)) == {
        "h100": ModelCapacity(gpus=16, nodes=2, largest_node=8)
    }
    assert pool_capacity(only_spot, []) == {}  # no node yet: the pools hold nothing


@pytest.mark.parametrize(
    ("pools", "nodes"),
    [
        ([], NODES),  # no pools: the tenant's pods may go anywhere
        ([{"name": "any"}], NODES),  # a pool selecting by nothing: any node
        ([SPOT], [*NODES, node("spot-x", "h100-spot", None, "8")]),  # GPUs of no model in the pools
    ],
    ids=["no-pools", "no-selector", "unknown-model"],
)
def test_labgate_says_nothing_when_it_cannot_tell(
    pools: list[dict[str, Any]], nodes: list[dict[str, Any]]
) -> None:
    assert pool_capacity(tenant({"h100": 16}, pools).spec.placement.node_pools, summaries(nodes)) is None


def test_a_quota_beyond_the_pools_is_a_shortfall_and_a_false_condition() -> None:
    capacity = {"h100": ModelCapacity(gpus=16, nodes=2, largest_node=8)}
    vision = tenant({"h100": 24, "a100": 4, "mig-1g.10gb": 8}, [SPOT])
    assert shortfalls(vision, capacity, COUNTING) == [
        Shortfall(model="a100", quota=4, capacity=None),
        Shortfall(model="h100", quota=24, capacity=capacity["h100"]),
    ]  # MIG slices are not nodes' whole GPUs: not judged
    assert shortfall_text(shortfalls(vision, capacity, COUNTING)[1]) == (
        "h100: quota 24, its pools' nodes hold 16 (2 nodes, the largest 8)"
    )
    assert quota_condition(vision, capacity, COUNTING) == {
        "type": "QuotaFitsPools",
        "status": "False",
        "observedGeneration": 3,
        "reason": "QuotaBeyondPools",
        "message": "a100: quota 4, its pools' nodes hold none; h100: quota 24, its pools' nodes hold 16 (2 nodes, the largest 8)",
    }


def test_a_quota_the_pools_hold_is_a_true_condition() -> None:
    capacity = {"h100": ModelCapacity(gpus=16, nodes=2, largest_node=8)}
    fits = tenant({"h100": 16}, [SPOT])
    assert shortfalls(fits, capacity, COUNTING) == []
    condition = quota_condition(fits, capacity, COUNTING)
    assert (condition["status"], condition["reason"]) == ("True", "PoolsHoldQuota")


# Issue 30 item 5: one spelling of a model's capacity, written to the status and read back from it.
def test_the_capacity_reads_back_as_written_and_bad_numbers_say_nothing() -> None:
    capacity = {"a100": ModelCapacity(gpus=4, nodes=1, largest_node=4), "h100": ModelCapacity(16, 2, 8)}
    written = capacity_document(capacity)
    assert written["h100"] == {"gpus": 16, "nodes": 2, "largestNode": 8}
    assert capacity_from_document(written) == capacity
    bad: dict[str, Any] = {
        "a100": {"gpus": "4", "nodes": 1, "largestNode": 4},
        "b200": {"gpus": True, "nodes": 1, "largestNode": 1},
        "l4": {"gpus": 0, "nodes": 0, "largestNode": 0},
        "t4": {"gpus": 4, "nodes": 1},
        "v100": 8,
        "h100": {"gpus": 16, "nodes": 2, "largestNode": 8},
    }
    assert capacity_from_document(bad) == {"h100": ModelCapacity(16, 2, 8)}
