"""A researcher's pod that no node takes is told so at apply (issue 28 item 5): on a cluster whose
every node is a tainted GPU pool, the first example (examples/experiment-pod.yaml, a pod without
GPUs) is admitted with placement-no-untainted-node's warning and indeed stays unscheduled; once an
untainted pool is added, the same pod is admitted without a word and bound there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster.nodes import NodePool, tenant_placement
from devcluster.stack import LabgateStack, NodeSimulation
from tests.e2e.conftest import TenantFactory, TenantUnderTest
from tests.e2e.test_cluster import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

EXAMPLE_POD = Path(__file__).resolve().parents[2] / "examples" / "experiment-pod.yaml"
TENANT = "cpu-lab"
RULE = "[placement-no-untainted-node]"
# Every node a tenant's GPU pool, tainted as devcluster/pools/lab.yaml taints them.
TAINTED_POOLS = [
    NodePool(name="cpu-lab-spot", tenant=TENANT, spot=True, nodes=1, gpu_product="h100", gpus=8),
    NodePool(name="cpu-lab-reserved", tenant=TENANT, spot=False, nodes=1, gpu_product="h100", gpus=8),
]
SHARED_CPU = NodePool(name="shared-cpu", nodes=1, gpus=0, cpu="64", memory="256Gi")


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabgateStack]:
    with LabgateStack(
        tmp_path_factory.mktemp("untainted"), nodes=NodeSimulation(pools=TAINTED_POOLS)
    ) as started:
        yield started


@pytest.fixture
def team(sim: LabgateStack) -> Iterator[TenantUnderTest]:
    factory = TenantFactory(sim)
    try:
        placement = tenant_placement(TAINTED_POOLS, TENANT)
        yield factory.create(name=TENANT, spec_extra={"gpu": {"total": 8}, "placement": placement})
    finally:
        factory.cleanup()


def _get(sim: LabgateStack, *args: str) -> dict[str, Any]:
    return dict(json.loads(sim.admin_kubectl("get", *args, "-o", "json")))


def _nodes_status(sim: LabgateStack) -> dict[str, Any]:
    return dict(_get(sim, f"tenant/{TENANT}").get("status", {}).get("nodes") or {})


def _experiment(name: str) -> dict[str, Any]:
    pod = yaml.safe_load(EXAMPLE_POD.read_text())
    pod["metadata"]["name"] = name
    return dict(pod)


def _warning(stderr: str) -> str:
    """The rule's warning as one text (the webhook cuts a long one into lines under 120 characters,
    each after the first starting "[rule] ...")."""
    lines = [line.removeprefix("Warning: ") for line in stderr.splitlines() if RULE in line]
    return " ".join(line.removeprefix(f"{RULE} ... ") for line in lines)


def _scheduled(sim: LabgateStack, team: TenantUnderTest, name: str) -> tuple[str, str]:
    """(nodeName, the PodScheduled condition's status) as the API says them."""
    pod = _get(sim, f"pod/{name}", "-n", team.namespace)
    conditions: list[dict[str, Any]] = pod["status"].get("conditions") or []
    scheduled = [str(c.get("status", "")) for c in conditions if c.get("type") == "PodScheduled"]
    return str(pod["spec"].get("nodeName") or ""), scheduled[0] if scheduled else ""


def test_a_pod_that_no_node_takes_is_told_at_apply_and_not_once_an_untainted_pool_exists(
    sim: LabgateStack, team: TenantUnderTest
) -> None:
    tainted = {"untainted": 0, "tainted": 2, "taintKeys": ["labgate.io/pool", "labgate.io/spot"]}
    eventually(lambda: _nodes_status(sim) == tainted, what=f"the Tenant's status.nodes says {tainted}")

    applied = team.researcher.apply(_experiment("hello-experiment"), team.namespace)
    assert applied.returncode == 0, applied.stderr  # a warning, not a refusal
    assert _warning(applied.stderr) == (
        f'{RULE} Pod "hello-experiment" asks no GPUs, and no node takes it now: every node is tainted'
        " (labgate.io/pool, labgate.io/spot) and it tolerates none. It pends until one does. Fix: ask the"
        ' infra team for a pool without taints for pods without GPUs (docs/infra.md, "A pool for pods'
        ' without GPUs")'
    ), applied.stderr
    # What the warning says is what happens: the scheduler finds no node for it.
    eventually(
        lambda: _scheduled(sim, team, "hello-experiment") == ("", "False"),
        what="hello-experiment found unschedulable (PodScheduled False, no nodeName)",
    )
    # A GPU pod is placed on its pools with their tolerations: not concerned, and bound.
    gpu_pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gpu-experiment"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.lab.example/team-a/trainer:v1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
        },
    }
    applied = team.researcher.apply(gpu_pod, team.namespace)
    assert applied.returncode == 0, applied.stderr
    assert RULE not in applied.stderr, applied.stderr
    eventually(lambda: _scheduled(sim, team, "gpu-experiment")[0] != "", what="gpu-experiment bound")

    # The legitimate cluster: an untainted pool for pods without GPUs. Nothing said, and bound there.
    assert sim.kwok is not None
    sim.kwok.add_pools([SHARED_CPU])
    eventually(
        lambda: _nodes_status(sim).get("untainted") == 1, what="the Tenant's status.nodes counts shared-cpu"
    )
    applied = team.researcher.apply(_experiment("second-experiment"), team.namespace)
    assert applied.returncode == 0, applied.stderr
    assert RULE not in applied.stderr, applied.stderr
    eventually(
        lambda: _scheduled(sim, team, "second-experiment") == ("shared-cpu-0", "True"),
        what="second-experiment bound to shared-cpu-0",
    )
