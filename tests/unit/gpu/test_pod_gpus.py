"""Counting a live pod's GPUs (for pods without a record or reservation, and the offline audit): the
reconciler's count is the scheduler's effective request, the same as the admission policy's."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings

from labgate.core.tenant import PREEMPTIBLE_LABEL, PREEMPTIBLE_PRIORITY_CLASS
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.ledger import GpuAmount
from labgate.gpu_accounting.pod_gpus import is_admitted_preemptible, pod_gpus
from tests.unit.gpu.test_gpu_demand import CONFIG, pod_specs, reference_demand

# What the reconciler counts when the chart gives it no --gpu-config.
DEFAULT = GpuCounting()


def container(gpus: int | str, *, resource: str = "nvidia.com/gpu", **extra: Any) -> dict[str, Any]:
    return {"name": "c", "image": "x", "resources": {"limits": {resource: str(gpus)}}, **extra}


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


@given(pod_specs())
@settings(max_examples=300, deadline=None)
def test_a_live_pod_counts_what_the_scheduler_reserves(spec: dict[str, Any]) -> None:
    counted = pod_gpus(pod(**spec), CONFIG)
    wanted = reference_demand(spec)
    assert counted.total == wanted["total"]
    assert {m: n for m, n in counted.by_model.items() if n} == wanted["by_model"]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [container(2), container(3)]}, GpuAmount(total=5, by_model={"unspecified": 5})),
        (
            {"containers": [container(2)], "nodeSelector": {"nvidia.com/gpu.product": "h100"}},
            GpuAmount(total=2, by_model={"h100": 2}),
        ),
        # An init container that asks more than the containers sets the pod's request.
        (
            {"containers": [container(1)], "initContainers": [container(4)]},
            GpuAmount(total=4, by_model={"unspecified": 4}),
        ),
        # An init container after a sidecar (restartPolicy Always) runs beside it.
        (
            {
                "containers": [container(1)],
                "initContainers": [container(2, restartPolicy="Always"), container(3)],
            },
            GpuAmount(total=5, by_model={"unspecified": 5}),
        ),
        # The pod's overhead is reserved too (the count before gpu_demand left it out).
        (
            {"containers": [container(2)], "overhead": {"nvidia.com/gpu": "1"}},
            GpuAmount(total=3, by_model={"unspecified": 3}),
        ),
        # Without a config: NVIDIA's MIG profiles count, each as its own model.
        (
            {"containers": [container(1, resource="nvidia.com/mig-1g.10gb"), container(2)]},
            GpuAmount(total=3, by_model={"mig-1g.10gb": 1, "unspecified": 2}),
        ),
        ({"containers": [container(2, resource="cpu")]}, GpuAmount()),
        ({"containers": [{"name": "c", "image": "x"}]}, GpuAmount()),
    ],
)
def test_the_default_counting(spec: dict[str, Any], expected: GpuAmount) -> None:
    assert pod_gpus(pod(**spec), DEFAULT) == expected


def test_weights_of_the_policy_config_apply_to_the_recount() -> None:
    """The ledger's total is weighted (gpu_resource_weights): a recount must weigh the same, or a
    rebuilt sum would differ from what admission recorded."""
    counting = GpuCounting.model_validate(
        {
            "gpu_resources": ["amd.com/gpu"],
            "gpu_model_label": "gpu",
            "gpu_resource_weights": {"amd.com/gpu": 2},
        }
    )
    spec = {"containers": [container(2, resource="amd.com/gpu")], "nodeSelector": {"gpu": "mi300"}}
    assert pod_gpus(pod(**spec), counting) == GpuAmount(total=4, by_model={"mi300": 2})
    # Not a GPU of this config: nothing held.
    assert pod_gpus(pod(containers=[container(2)]), counting) == GpuAmount()


def test_a_pod_without_a_spec_holds_nothing() -> None:
    assert pod_gpus({"metadata": {"name": "p"}}, DEFAULT) == GpuAmount()


def test_preemptible_pods_are_known_by_label_and_priority_class() -> None:
    marked = pod(containers=[container(1)], priorityClassName=PREEMPTIBLE_PRIORITY_CLASS)
    marked["metadata"]["labels"] = {PREEMPTIBLE_LABEL: "true"}
    assert is_admitted_preemptible(marked)
    marked["spec"]["priorityClassName"] = "research-default"
    assert not is_admitted_preemptible(marked)
    marked["spec"]["priorityClassName"] = PREEMPTIBLE_PRIORITY_CLASS
    marked["metadata"]["labels"] = {PREEMPTIBLE_LABEL: "false"}
    assert not is_admitted_preemptible(marked)
