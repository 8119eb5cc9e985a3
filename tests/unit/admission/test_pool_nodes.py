"""tenant-quota-beyond-pools' input on a Tenant write: the nodes its pools select, read live (issue 22)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import pytest

from labgate.core.api_resources import Kind
from labgate.core.kube import KubeApi
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.pool_capacity import PoolCapacityDocument
from tests.unit.admission.test_serving_volumes import _Engine, _Inventory
from webhook import facts
from webhook.policy_input import PolicyInput
from webhook.pool_nodes import PoolNodes, gpu_counting
from webhook.replica import FactSources, admission_server
from webhook.review import AdmissionRequest, parse_request

POOL = {"labgate.io/pool": "h100-spot", "nvidia.com/gpu.product": "h100"}


def _node(name: str, labels: dict[str, str], gpus: str = "8") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"nvidia.com/gpu": gpus}}}


class _Nodes:
    """A Kubernetes door that lists nodes by an equality label selector, as the API does."""

    def __init__(self, nodes: list[dict[str, Any]], *, fails: bool = False):
        self.nodes, self.fails = nodes, fails
        self.asked: list[tuple[str, str | None, float]] = []

    def list(self, kind: Kind, *, label_selector: str | None = None, timeout: float = 10) -> dict[str, Any]:
        self.asked.append((kind.plural, label_selector, timeout))
        if self.fails:
            raise OSError("apiserver unreachable")
        wanted = dict(pair.split("=", 1) for pair in (label_selector or "").split(",") if pair)
        items = [n for n in self.nodes if all(n["metadata"]["labels"].get(k) == v for k, v in wanted.items())]
        return {"items": items}


def _tenant(pools: list[dict[str, Any]], h100: int = 24) -> dict[str, Any]:
    return {
        "apiVersion": "labgate.io/v1alpha1",
        "kind": "Tenant",
        "metadata": {"name": "vision"},
        "spec": {"gpu": {"models": {"h100": h100}}, "placement": {"nodePools": pools}},
    }


def _reader(nodes: _Nodes) -> PoolNodes:
    return PoolNodes(cast(KubeApi, nodes), GpuCounting(), timeout=1.5)


CLUSTER = [
    _node("spot-0", {**POOL}),
    _node("spot-1", {**POOL}, gpus="4"),
    _node("other-0", {"labgate.io/pool": "other", "nvidia.com/gpu.product": "h100"}),
    _node("cpu-0", {**POOL}, gpus="0"),
]


def test_the_nodes_of_the_pools_are_listed_by_their_selectors_and_summed() -> None:
    nodes = _Nodes(CLUSTER)
    spot = {"name": "spot", "nodeSelector": POOL}
    again = {"name": "spot-again", "nodeSelector": dict(reversed(POOL.items()))}
    capacity = _reader(nodes).capacity_of(_tenant([spot, again]))
    assert capacity == {"h100": {"gpus": 12, "nodes": 2, "largestNode": 8}}
    # One list per distinct selector, with the reader's timeout.
    assert nodes.asked == [("nodes", "labgate.io/pool=h100-spot,nvidia.com/gpu.product=h100", 1.5)]


@pytest.mark.parametrize(
    "pools",
    [
        [],  # no pools: labgate cannot tell
        [{"name": "any", "nodeSelector": {}}],  # a pool selecting any node
        [{"name": "bad", "nodeSelector": "h100"}],  # does not parse
    ],
)
def test_what_labgate_cannot_tell_reads_no_node(pools: list[dict[str, Any]]) -> None:
    nodes = _Nodes(CLUSTER)
    assert _reader(nodes).capacity_of(_tenant(pools)) is None
    assert nodes.asked == []


def _write(operation: str, tenant: dict[str, Any], sub_resource: str | None = None) -> AdmissionRequest:
    return parse_request(
        {
            "uid": "u",
            "kind": {"group": "labgate.io", "version": "v1alpha1", "kind": "Tenant"},
            "resource": {"group": "labgate.io", "version": "v1alpha1", "resource": "tenants"},
            "name": "vision",
            "operation": operation,
            "userInfo": {"username": "infra", "groups": ["system:masters"]},
            "object": tenant,
            **({"oldObject": tenant} if operation == "UPDATE" else {}),
            **({"subResource": sub_resource} if sub_resource else {}),
        }
    )


def _gather(nodes: _Nodes, request: AdmissionRequest) -> PolicyInput:
    server = admission_server(_Engine(), FactSources(inventory=_Inventory(), pool_nodes=_reader(nodes)))
    policy_input, _, _ = asyncio.run(server.facts.gather(request))
    return policy_input


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE"])
def test_a_tenant_write_gets_what_its_pools_nodes_hold(operation: str) -> None:
    policy_input = _gather(
        _Nodes(CLUSTER), _write(operation, _tenant([{"name": "spot", "nodeSelector": POOL}]))
    )
    assert policy_input["tenant_pool_gpus"] == {"h100": {"gpus": 12, "nodes": 2, "largestNode": 8}}


def test_a_status_write_reads_no_node() -> None:
    nodes = _Nodes(CLUSTER)
    tenant = _tenant([{"name": "spot", "nodeSelector": POOL}])
    assert "tenant_pool_gpus" not in _gather(nodes, _write("UPDATE", tenant, sub_resource="status"))
    assert nodes.asked == []


def test_an_api_that_cannot_say_leaves_the_key_out_and_decides_on() -> None:
    nodes = _Nodes(CLUSTER, fails=True)
    policy_input = _gather(nodes, _write("CREATE", _tenant([{"name": "spot", "nodeSelector": POOL}])))
    assert "tenant_pool_gpus" not in policy_input
    assert nodes.asked  # it was asked, and its failure was dropped


def test_a_slow_api_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    class _Slow:
        def capacity_of(self, tenant: Mapping[str, Any]) -> PoolCapacityDocument | None:
            time.sleep(0.5)  # an API slower than the bound
            return {"h100": {"gpus": 8, "nodes": 1, "largestNode": 8}}

    monkeypatch.setattr(facts, "POOL_NODES_SECONDS", 0.05)
    server = admission_server(_Engine(), FactSources(inventory=_Inventory(), pool_nodes=_Slow()))
    policy_input, _, _ = asyncio.run(server.facts.gather(_write("CREATE", _tenant([]))))
    assert "tenant_pool_gpus" not in policy_input


def test_gpu_counting_comes_from_the_policies_config(tmp_path: Path) -> None:
    assert gpu_counting(None) == GpuCounting()
    assert gpu_counting(tmp_path) == GpuCounting()  # no config there
    config = tmp_path / "labgate" / "config" / "data.json"
    config.parent.mkdir(parents=True)
    config.write_text(
        json.dumps({"gpu_resources": ["amd.com/gpu"], "gpu_model_label": "amd.com/gpu.product"})
    )
    counting = gpu_counting(tmp_path)
    assert counting.gpu_resources == ("amd.com/gpu",)
    assert counting.gpu_model_label == "amd.com/gpu.product"
    config.write_text("{not json")
    assert gpu_counting(tmp_path) == GpuCounting()
