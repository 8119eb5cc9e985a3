"""Simulated node pools (devcluster/nodes.py): the nodes and Tenant placement a pool gives."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from devcluster.nodes import (
    KWOK_CONFIG,
    POOLS_DIR,
    NodePool,
    kwok_configuration,
    load_pools,
    tenant_placement,
)


def test_a_tenant_spot_pool_becomes_tainted_labelled_gpu_nodes() -> None:
    pool = NodePool(name="vision-spot", tenant="vision", spot=True, nodes=2, gpu_product="h100")
    nodes = pool.node_manifests()
    assert [n["metadata"]["name"] for n in nodes] == ["vision-spot-0", "vision-spot-1"]
    labels = nodes[0]["metadata"]["labels"]
    assert labels["labgate.io/node-pool"] == "vision-spot"
    assert labels["nvidia.com/gpu.product"] == "h100"
    assert labels["labgate.io/capacity-type"] == "spot"
    assert nodes[0]["spec"]["taints"] == [
        {"key": "labgate.io/pool", "value": "vision", "effect": "NoSchedule"},
        {"key": "labgate.io/spot", "value": "true", "effect": "NoSchedule"},
    ]
    assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_tenant_placement_tolerates_exactly_its_pools_taints_spot_first() -> None:
    pools = [
        NodePool(name="v-reserved", tenant="v", gpu_product="a100"),
        NodePool(name="v-spot", tenant="v", spot=True, gpu_product="h100"),
        NodePool(name="w-spot", tenant="w", spot=True, gpu_product="h100"),
    ]
    placement = tenant_placement(pools, "v", allow_on_demand=True)
    assert [p["name"] for p in placement["nodePools"]] == ["v-spot", "v-reserved"]
    assert placement["nodePools"][0]["tolerations"] == [
        {"key": "labgate.io/pool", "value": "v", "effect": "NoSchedule", "operator": "Equal"},
        {"key": "labgate.io/spot", "value": "true", "effect": "NoSchedule", "operator": "Equal"},
    ]
    assert placement["allowOnDemand"] is True


def test_shipped_pool_files_and_kwok_configuration_are_valid() -> None:
    for path in POOLS_DIR.glob("*.yaml"):
        assert load_pools(path), path
    documents = list(yaml.safe_load_all(kwok_configuration(lease_seconds=120)))
    options = documents[0]["options"]
    assert documents[0]["kind"] == "KwokConfiguration"
    assert options["nodeLeaseDurationSeconds"] == 120
    assert all(options[k] > 0 for k in options if k.endswith("Parallelism"))
    stages = {d["metadata"]["name"] for d in documents[1:]}
    assert {
        "node-initialize",
        "node-heartbeat-with-lease",
        "pod-ready",
        "pod-complete-after-run-for",
        "pod-delete",
    } <= stages
    assert KWOK_CONFIG.is_file()


def test_a_pool_without_gpus_is_untainted_cpu_nodes_without_a_model() -> None:
    pool = NodePool(name="shared-cpu", gpus=0)
    [node] = pool.node_manifests()
    assert node["spec"]["taints"] == []
    assert "nvidia.com/gpu.product" not in node["metadata"]["labels"]
    assert "nvidia.com/gpu" not in node["status"]["allocatable"]
    assert pool.tenant_pool()["nodeSelector"] == {"labgate.io/node-pool": "shared-cpu"}


def test_a_pool_with_gpus_but_no_model_is_refused() -> None:
    with pytest.raises(ValidationError, match="no gpuProduct"):
        NodePool(name="gpus-of-no-model", gpus=8)


def test_the_demo_lab_has_an_untainted_pool_for_pods_without_gpus() -> None:
    """make run's first example is a CPU pod: labgate places no pod without GPUs on a tenant's pool,
    so the lab must have a node with no taint, or that pod never runs."""
    pools = load_pools(POOLS_DIR / "lab.yaml")
    open_pools = [p for p in pools if not p.taints() and p.nodes > 0]
    assert [p.name for p in open_pools] == ["shared-cpu"]
    assert not open_pools[0].has_gpus
    assert all(p.tenant for p in pools if p.has_gpus)  # every GPU pool is kept for its tenant
