"""The truth metric's own arithmetic (tests/cluster_truth.py), against cases worked out by hand from
the Kubernetes documentation of effective requests (init containers and native sidecars)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.cluster_truth import (
    TenantGpus,
    bound_requests,
    effective_gpu_request,
    effective_request,
    parse_quantity,
    quota_overshoot,
    tenant_gpus,
)


def c(
    gpus: int | None = None, *, request: int | None = None, sidecar: bool = False, mig: int = 0
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if gpus is not None:
        resources["limits"] = {"nvidia.com/gpu": str(gpus)}
    if request is not None:
        resources["requests"] = {"nvidia.com/gpu": str(request)}
    if mig:
        resources.setdefault("limits", {})["nvidia.com/mig-1g.10gb"] = str(mig)
    container: dict[str, Any] = {"name": "x", "image": "i", "resources": resources}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


@pytest.mark.parametrize(
    ("containers", "init", "expected"),
    [
        ([c(2), c(3)], [], 5),  # app containers add up
        ([c(2)], [c(4)], 4),  # an init container larger than the app wins
        ([c(4)], [c(2)], 4),  # a smaller one does not count
        ([c(1)], [c(2, sidecar=True)], 3),  # a sidecar runs beside the app
        ([c(1)], [c(2, sidecar=True), c(4)], 6),  # an init container runs beside earlier sidecars
        ([c(1)], [c(4), c(2, sidecar=True)], 4),  # ...but not beside later ones
        ([c(None, request=2)], [], 2),  # requests count when there is no limit
        ([c()], [], 0),
    ],
)
def test_effective_request_as_the_scheduler_counts(
    containers: list[dict[str, Any]], init: list[dict[str, Any]], expected: int
) -> None:
    assert (
        effective_gpu_request({"containers": containers, "initContainers": init})["nvidia.com/gpu"]
        == expected
    )


def _pod(
    ns: str, spec: dict[str, Any], *, node: str | None, phase: str = "Running", cls: str = ""
) -> dict[str, Any]:
    return {
        "metadata": {"namespace": ns, "name": "p"},
        "spec": {**spec, "nodeName": node, "priorityClassName": cls},
        "status": {"phase": phase},
    }


def test_bound_gpus_count_bound_pods_by_the_node_model_and_skip_finished_and_other_namespaces() -> None:
    spec = {"containers": [c(4, mig=2)]}
    pods = [
        _pod("a", spec, node="n-h100"),
        _pod("a", spec, node=None),  # pending
        _pod("a", spec, node="n-h100", phase="Succeeded"),
        _pod("a", spec, node="n-h100", cls="research-preemptible"),
        _pod("a", spec, node=None, cls="research-preemptible"),
        _pod("kube-system", spec, node="n-h100"),
    ]
    got = tenant_gpus(pods, namespace_tenants={"a": "team-a"}, models={"n-h100": "h100"})["team-a"]
    assert got.bound_total == 6
    assert got.bound_by_model == Counter({"h100": 4, "mig-1g.10gb": 2})
    assert got.pending_total == 6
    assert got.preemptible_bound_total == 6
    assert got.pending_preemptible_total == 6


def test_overshoot_per_total_listed_model_and_unlisted_model() -> None:
    gpus = TenantGpus(bound_total=10, bound_by_model=Counter({"h100": 6, "a100": 4}))
    assert quota_overshoot(gpus, {"total": 16}) == 0
    assert quota_overshoot(gpus, {"total": 8}) == 2
    assert quota_overshoot(gpus, {"total": 16, "models": {"h100": 4, "a100": 8}}) == 2
    assert quota_overshoot(gpus, {"total": 16, "models": {"h100": 8}}) == 4  # a100 is not listed


# -- CPU, memory and pods, with pod-level resources (KEP-2837) -----------------------------------------


def m(memory: str | None = None, *, limit: str | None = None, sidecar: bool = False) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if memory is not None:
        resources["requests"] = {"memory": memory, "cpu": "100m"}
    if limit is not None:
        resources["limits"] = {"memory": limit}
    container: dict[str, Any] = {"name": "x", "image": "i", "resources": resources}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


GI = 1 << 30


@pytest.mark.parametrize(
    ("spec", "memory"),
    [
        ({"containers": [m("1Gi"), m("2Gi")]}, 3 * GI),
        ({"containers": [m("1Gi")], "initContainers": [m("1Gi", sidecar=True), m("4Gi")]}, 5 * GI),
        ({"containers": [m(limit="2Gi")]}, 2 * GI),  # a limit alone is the request
        ({"containers": [m("1Gi")], "overhead": {"memory": "512Mi"}}, GI + GI // 2),
        # The pod-level request replaces the containers' count; the overhead comes on top.
        ({"containers": [m("256Mi")], "resources": {"requests": {"memory": "900Gi"}}}, 900 * GI),
        (
            {
                "containers": [m("256Mi")],
                "initContainers": [m("8Gi")],
                "resources": {"requests": {"memory": "4Gi"}},
                "overhead": {"memory": "1Gi"},
            },
            5 * GI,
        ),
        # A pod-level limit alone is defaulted into the request only when no container names memory.
        ({"containers": [{"name": "x"}], "resources": {"limits": {"memory": "8Gi"}}}, 8 * GI),
        ({"containers": [m("1Gi")], "resources": {"limits": {"memory": "8Gi"}}}, GI),
        # A pod-level request of another resource leaves memory to the containers.
        ({"containers": [m("1Gi")], "resources": {"requests": {"cpu": "8"}}}, GI),
    ],
)
def test_memory_as_the_scheduler_counts_with_pod_level_resources(spec: dict[str, Any], memory: int) -> None:
    assert effective_request(spec, "memory") == memory


def test_cpu_in_millicores_rounded_up_once_per_pod_and_a_pod_is_one_pod() -> None:
    spec = {"containers": [m("1Gi"), m("1Gi")], "resources": {"requests": {"cpu": "1.5"}}}
    assert effective_request(spec, "cpu") == 1500
    assert effective_request({"containers": [m("1Gi"), m("1Gi")]}, "cpu") == 200
    half = {"name": "x", "resources": {"requests": {"cpu": "0.0005"}}}
    assert effective_request({"containers": [half, half]}, "cpu") == 1
    assert effective_request(spec, "pods") == 1


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1Ti", 1 << 40),
        ("500m", 0.5),
        ("1e3", 1000),
        ("1.5Gi", 3 << 29),
        ("2k", 2000),
        (8, 8),
        ("100u", 1e-4),
    ],
)
def test_quantities(text: Any, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


def test_bound_requests_count_bound_live_pods_of_the_namespaces() -> None:
    spec = {"containers": [m("256Mi")], "resources": {"requests": {"memory": "900Gi"}}}
    pods = [
        _pod("a", spec, node="n1"),
        _pod("b", spec, node="n2"),
        _pod("a", spec, node=None),  # pending: not bound
        _pod("a", spec, node="n1", phase="Failed"),
        _pod("c", spec, node="n1"),  # another namespace
    ]
    assert bound_requests(pods, namespaces=["a", "b"]) == {"cpu": 200, "memory": 1800 * GI, "pods": 2}
