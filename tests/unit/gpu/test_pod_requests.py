"""A pod's CPU, memory and pod slots as the scheduler counts them, and a tenant's sum (pure, by
tables): the usage the tenant-quota rule compares with spec.limits. The Rego rule's own tests
(policies/labgate/rules/tenant_quota) pin the same numbers for the same shapes."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcluster.tools import binary, ensure_tools
from labgate.gpu_accounting.pod_requests import (
    effective_request,
    limit_units,
    pod_requests,
    quantity_text,
    tenant_usage,
)
from tests.policy_eval import eval_policies

REPO = Path(__file__).resolve().parents[3]


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


# Pod-level resources (spec.resources, Kubernetes 1.34's PodLevelResources): the scheduler's count is
# the pod-level request where one is set, whatever the containers ask; the overhead comes on top.
TINY = [container("main", {"cpu": "250m", "memory": "256Mi"})]


@pytest.mark.parametrize(
    ("spec", "memory"),
    [
        # The pod-level request replaces the containers' sum.
        ({"containers": TINY, "resources": {"requests": {"memory": "900Gi"}}}, 900 << 30),
        # ...also below it (the apiserver refuses that shape; the scheduler's rule is a replacement).
        ({"containers": TINY, "resources": {"requests": {"memory": "128Mi"}}}, 128 << 20),
        # A pod-level limit alone is the request when no container names the resource (the apiserver's
        # defaulting of pod-level requests) ...
        (
            {"containers": [container("main", {"cpu": "1"})], "resources": {"limits": {"memory": "8Gi"}}},
            8 << 30,
        ),
        # ... and the containers' sum when one does.
        ({"containers": TINY, "resources": {"limits": {"memory": "8Gi"}}}, 256 << 20),
        (
            {
                "containers": [container("main", limits={"memory": "1Gi"})],
                "resources": {"limits": {"memory": "8Gi"}},
            },
            1 << 30,
        ),
        # A request wins over the limit at pod level too.
        (
            {"containers": TINY, "resources": {"requests": {"memory": "2Gi"}, "limits": {"memory": "8Gi"}}},
            2 << 30,
        ),
        # Init containers, sidecars and their peak are replaced as well; the overhead is added.
        (
            {
                "initContainers": [container("warmup", {"memory": "64Gi"})],
                "containers": TINY,
                "resources": {"requests": {"memory": "100Gi"}},
                "overhead": {"memory": "1Gi"},
            },
            101 << 30,
        ),
        # A pod-level request of another resource leaves memory to the containers.
        ({"containers": TINY, "resources": {"requests": {"cpu": "64", "hugepages-2Mi": "1Gi"}}}, 256 << 20),
    ],
)
def test_pod_level_resources_are_the_request_where_set(spec: dict[str, Any], memory: int) -> None:
    assert effective_request(spec, "memory") == memory


def test_pod_level_cpu_counts_in_millicores() -> None:
    spec = {"containers": TINY, "resources": {"requests": {"cpu": "1500m"}}, "overhead": {"cpu": "250m"}}
    assert effective_request(spec, "cpu") == 1750
    assert pod_requests({"spec": spec}) == {"cpu": 1750, "memory": 256 << 20, "pods": 1}


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


# -- the same rules three ways: a reference written here, the Python, and the Rego (pinned OPA) -------

CPU_TEXTS = ["0", "1", "2", "250m", "500m", "1500m", "0.5"]
MEMORY_TEXTS = ["64Mi", "256Mi", "1Gi", "1.5Gi", "1000"]


def _reference_millicores(text: str) -> int:
    return int(text[:-1]) if text.endswith("m") else int(Decimal(text) * 1000)


def _reference_bytes(text: str) -> int:
    for suffix, size in (("Gi", 1 << 30), ("Mi", 1 << 20)):
        if text.endswith(suffix):
            return int(Decimal(text[: -len(suffix)]) * size)
    return int(text)


def _reference_asked(container: dict[str, Any], resource: str) -> int:
    """The request, else the limit (the apiserver copies a limit into a missing request)."""
    resources = container.get("resources") or {}
    for where in ("requests", "limits"):
        if resource in (resources.get(where) or {}):
            text = str(resources[where][resource])
            return _reference_millicores(text) if resource == "cpu" else _reference_bytes(text)
    return 0


def _reference_pod_level(spec: dict[str, Any], resource: str) -> int | None:
    """KEP-2837: a pod-level request replaces what the containers ask. Where spec.resources has only a
    limit, the apiserver defaults the pod-level request to it when no container names the resource
    (and to the containers' own sum when one does, which changes nothing)."""
    pod_level = spec.get("resources") or {}
    if resource in (pod_level.get("requests") or {}):
        return _reference_asked({"resources": {"requests": pod_level["requests"]}}, resource)
    named = any(
        resource in ((c.get("resources") or {}).get(where) or {})
        for c in [*spec["containers"], *(spec.get("initContainers") or [])]
        for where in ("requests", "limits")
    )
    if resource in (pod_level.get("limits") or {}) and not named:
        return _reference_asked({"resources": {"limits": pod_level["limits"]}}, resource)
    return None


def reference_request(spec: dict[str, Any], resource: str) -> int:
    """The peak over a pod's phases (KEP-753): while plain init container i runs, the sidecars declared
    before it run too; then every sidecar and app container together. A pod-level request (KEP-2837)
    stands for all of them. Overhead on top."""
    overhead = (spec.get("overhead") or {}).get(resource)
    extra = (
        0
        if overhead is None
        else _reference_asked({"resources": {"requests": {resource: overhead}}}, resource)
    )
    pod_level = _reference_pod_level(spec, resource)
    return (_reference_containers(spec, resource) if pod_level is None else pod_level) + extra


def _reference_containers(spec: dict[str, Any], resource: str) -> int:
    phases: list[int] = []
    sidecars: list[int] = []
    for container in spec.get("initContainers") or []:
        if container.get("restartPolicy") == "Always":
            sidecars.append(_reference_asked(container, resource))
        else:
            phases.append(sum(sidecars) + _reference_asked(container, resource))
    phases.append(sum(sidecars) + sum(_reference_asked(c, resource) for c in spec["containers"]))
    return max(phases)


@st.composite
def _container(draw: st.DrawFn, *, init: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "x"}
    resources: dict[str, Any] = {}
    for where in ("requests", "limits"):
        asked = {}
        if draw(st.booleans()):
            asked["cpu"] = draw(st.sampled_from(CPU_TEXTS))
        if draw(st.booleans()):
            asked["memory"] = draw(st.sampled_from(MEMORY_TEXTS))
        if asked:
            resources[where] = asked
    if resources:
        container["resources"] = resources
    if init and draw(st.booleans()):
        container["restartPolicy"] = "Always"
    return container


@st.composite
def pod_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(st.lists(_container(init=False), min_size=1, max_size=3))}
    if inits := draw(st.lists(_container(init=True), max_size=3)):
        spec["initContainers"] = inits
    if draw(st.integers(0, 3)) == 0:
        spec["overhead"] = {"cpu": draw(st.sampled_from(CPU_TEXTS)), "memory": "64Mi"}
    if draw(st.booleans()):
        spec["resources"] = draw(_pod_level())
    return spec


@st.composite
def _pod_level(draw: st.DrawFn) -> dict[str, Any]:
    """spec.resources: requests and limits of cpu, memory (in any relation to the containers') and
    hugepages, which the pod's cpu and memory ignore."""
    resources: dict[str, Any] = {}
    for where in ("requests", "limits"):
        asked: dict[str, Any] = {}
        if draw(st.booleans()):
            asked["cpu"] = draw(st.sampled_from([*CPU_TEXTS, "64"]))
        if draw(st.booleans()):
            asked["memory"] = draw(st.sampled_from([*MEMORY_TEXTS, "900Gi"]))
        if draw(st.integers(0, 3)) == 0:
            asked["hugepages-2Mi"] = "1Gi"
        if asked:
            resources[where] = asked
    return resources


@given(pod_specs())
@settings(max_examples=300, deadline=None)
def test_python_requests_are_the_reference(spec: dict[str, Any]) -> None:
    for resource in ("cpu", "memory"):
        assert effective_request(spec, resource) == reference_request(spec, resource), (resource, spec)


@pytest.fixture(scope="module")
def opa() -> str:
    ensure_tools("opa")
    return binary("opa")


def _rego_asks(opa: str, specs: list[dict[str, Any]]) -> list[dict[str, int]]:
    value: list[dict[str, int]] = eval_policies(
        opa,
        '[{r: data.labgate.rules.tenant_quota.asks(s, r) | some r in ["cpu", "memory"]} | some s in input.specs]',
        {"specs": specs},
    )
    return value


@given(st.lists(pod_specs(), min_size=40, max_size=40))
@settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.data_too_large, HealthCheck.too_slow]
)
def test_rego_asks_what_the_reference_and_python_say(opa: str, specs: list[dict[str, Any]]) -> None:
    for spec, rego in zip(specs, _rego_asks(opa, specs), strict=True):
        expected = {r: reference_request(spec, r) for r in ("cpu", "memory")}
        assert rego == expected, spec
        assert {r: effective_request(spec, r) for r in ("cpu", "memory")} == expected, spec
