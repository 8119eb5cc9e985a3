"""Counting a live pod's GPUs as the scheduler does (for pods without a record or reservation)."""

from __future__ import annotations

from typing import Any

import pytest

from labgate.core.gpu_ledger import GpuAmount
from labgate.core.pod_gpus import GpuCounting, is_admitted_preemptible, pod_gpus, quantity

COUNTING = GpuCounting()


def container(gpus: int | str, *, resource: str = "nvidia.com/gpu", **extra: Any) -> dict[str, Any]:
    return {"name": "c", "image": "x", "resources": {"limits": {resource: str(gpus)}}, **extra}


def pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


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
        # A sidecar (restartPolicy Always) runs beside the containers: it adds.
        (
            {"containers": [container(1)], "initContainers": [container(2, restartPolicy="Always")]},
            GpuAmount(total=3, by_model={"unspecified": 3}),
        ),
        # An init container after a sidecar runs beside it.
        (
            {
                "containers": [container(1)],
                "initContainers": [container(2, restartPolicy="Always"), container(3)],
            },
            GpuAmount(total=5, by_model={"unspecified": 5}),
        ),
        (
            {"containers": [container(1, resource="nvidia.com/mig-1g.10gb"), container(2)]},
            GpuAmount(total=3, by_model={"mig-1g.10gb": 1, "unspecified": 2}),
        ),
        ({"containers": [container(2, resource="cpu")]}, GpuAmount()),
        ({"containers": [{"name": "c", "image": "x"}]}, GpuAmount()),
    ],
)
def test_pod_gpus_follow_the_effective_request(spec: dict[str, Any], expected: GpuAmount) -> None:
    assert pod_gpus(pod(**spec), COUNTING) == expected


def test_a_request_without_a_limit_counts() -> None:
    spec = {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]}
    assert pod_gpus(pod(**spec), COUNTING).total == 2


def test_quantities() -> None:
    assert [quantity(v) for v in ("2", 3, "1k", "0.5", "junk")] == [2, 3, 1000, 1, 0]


def test_preemptible_pods_are_known_by_label_and_priority_class() -> None:
    marked = pod(containers=[container(1)], priorityClassName="research-preemptible")
    marked["metadata"]["labels"] = {"labgate.io/preemptible": "true"}
    assert is_admitted_preemptible(marked, COUNTING)
    marked["spec"]["priorityClassName"] = "research-default"
    assert not is_admitted_preemptible(marked, COUNTING)


def test_counting_reads_the_policy_configuration() -> None:
    counting = GpuCounting.from_config({"gpu_resources": ["amd.com/gpu"], "gpu_model_label": "gpu"})
    spec = {"containers": [container(2, resource="amd.com/gpu")], "nodeSelector": {"gpu": "mi300"}}
    assert pod_gpus(pod(**spec), counting) == GpuAmount(total=2, by_model={"mi300": 2})
