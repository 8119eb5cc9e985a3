"""A pod's CPU, memory and pod slots as the scheduler counts them, and a tenant's sum (pure, by
tables): the usage the tenant-quota rule compares with spec.limits. The Rego rule's own tests
(policies/labgate/rules/tenant_quota) pin the same numbers for the same shapes."""

from __future__ import annotations

from typing import Any

import pytest

from labgate.gpu_accounting.pod_requests import (
    effective_request,
    limit_units,
    pod_requests,
    quantity_text,
    tenant_usage,
)


def container(
    name: str, requests: dict[str, Any] | None = None, limits: dict[str, Any] | None = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "x", "resources": resources}


def sidecar(name: str, cpu: str) -> dict[str, Any]:
    return {**container(name, {"cpu": cpu}), "restartPolicy": "Always"}


@pytest.mark.parametrize(
    ("spec", "cpu"),
    [
        ({"containers": [container("a", {"cpu": "2"}), container("b", {"cpu": "500m"})]}, 2500),
        # A limit alone is the request (the apiserver's defaulting); a request wins over a limit.
        ({"containers": [container("a", limits={"cpu": "3"})]}, 3000),
        ({"containers": [container("a", {"cpu": "1"}, {"cpu": "3"})]}, 1000),
        # A plain init container runs alone, before the app: the larger of the two counts.
        (
            {"initContainers": [container("i", {"cpu": "6"})], "containers": [container("a", {"cpu": "1"})]},
            6000,
        ),
        # A native sidecar runs beside the app, and beside the init containers declared after it;
        # the overhead comes on top (the Rego test of the same shape says 7250m).
        (
            {
                "initContainers": [sidecar("proxy", "1"), container("warmup", {"cpu": "6"})],
                "containers": [container("main", {"cpu": "500m"})],
                "overhead": {"cpu": "250m"},
            },
            7250,
        ),
        # A fraction of a millicore rounds up, as Kubernetes counts millicores.
        ({"containers": [container("a", {"cpu": "0.0005"})]}, 1),
        ({"containers": [container("a")]}, 0),
        ({"containers": "not a list"}, 0),
    ],
)
def test_cpu_is_the_effective_request_in_millicores(spec: dict[str, Any], cpu: int) -> None:
    assert effective_request(spec, "cpu") == cpu


def test_a_pod_asks_its_cpu_memory_and_one_pod() -> None:
    pod = {"spec": {"containers": [container("a", {"cpu": "2", "memory": "1Gi"})]}}
    assert pod_requests(pod) == {"cpu": 2000, "memory": 1 << 30, "pods": 1}


def test_a_tenant_uses_what_its_live_pods_ask_finished_ones_not() -> None:
    pods = [
        ("Running", {"cpu": 2000, "memory": 1 << 30, "pods": 1}),
        ("Pending", {"cpu": 500, "memory": 0, "pods": 1}),  # not bound yet: counted, as ResourceQuota does
        ("Succeeded", {"cpu": 8000, "memory": 1 << 30, "pods": 1}),
        ("Failed", {"cpu": 8000, "memory": 1 << 30, "pods": 1}),
    ]
    assert tenant_usage(pods) == {"cpu": 2500, "memory": 1 << 30, "pods": 2}
    assert tenant_usage([]) == {}  # no pods: no usage (the ledger stores nothing)


@pytest.mark.parametrize(
    ("resource", "value", "units", "text"),
    [
        ("cpu", "64", 64000, "64"),
        ("cpu", 8, 8000, "8"),
        ("cpu", "500m", 500, "500m"),
        ("cpu", "1.5", 1500, "1500m"),
        ("memory", "256Gi", 256 << 30, "256Gi"),
        ("memory", "1536Mi", 1536 << 20, "1536Mi"),
        ("memory", "1000", 1000, "1000"),
        ("pods", 100, 100, "100"),
    ],
)
def test_limits_in_counting_units_and_back_as_quantities(
    resource: str, value: Any, units: int, text: str
) -> None:
    assert limit_units(value, resource) == units
    assert quantity_text(resource, units) == text


def test_no_limit_is_none() -> None:
    assert limit_units(None, "cpu") is None
