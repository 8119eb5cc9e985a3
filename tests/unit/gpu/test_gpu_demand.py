"""A pod's GPU demand is the scheduler's: labgate's Python (labgate.gpu_accounting.demand) and Rego
(labgate.lib.gpu) computations both equal a reference implementation of Kubernetes' effective-request
rules written here independently, over generated pod specs."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devcluster.tools import binary, ensure_tools
from labgate.gpu_accounting.demand import (
    DraDeviceClass,
    GpuCounting,
    effective_request,
    load_gpu_counting,
    pod_demand,
    quantity,
)
from labgate.gpu_accounting.ledger import GpuAmount
from tests.policy_eval import eval_policies

REPO = Path(__file__).resolve().parents[3]
CONFIG = load_gpu_counting()
MODEL_LABEL = CONFIG.gpu_model_label

# -- the reference: a pod's life as a timeline of what runs at once ----------------------------------


def _reference_amount(container: Mapping[str, Any], resource: str) -> int:
    """Limits else requests (the apiserver defaults an extended resource's request to its limit)."""
    resources = container.get("resources") or {}
    for where in ("limits", "requests"):
        if resource in (resources.get(where) or {}):
            return int(resources[where][resource])
    return 0


def reference_request(spec: Mapping[str, Any], resource: str) -> int:
    """KEP-753's exposition: the pod's request is the peak over the phases of its life. While init
    container i (not a sidecar) runs, every sidecar declared before it runs too; afterwards every
    sidecar and every app container run together. Overhead is added on top."""
    phases: list[int] = []
    started_sidecars: list[int] = []
    for container in spec.get("initContainers") or []:
        amount = _reference_amount(container, resource)
        if container.get("restartPolicy") == "Always":
            started_sidecars.append(amount)
        else:
            phases.append(sum(started_sidecars) + amount)
    phases.append(sum(started_sidecars) + sum(_reference_amount(c, resource) for c in spec["containers"]))
    return max(phases) + int((spec.get("overhead") or {}).get(resource, 0))


RESOURCES = ["nvidia.com/gpu", "nvidia.com/gpu.shared", "amd.com/gpu", "nvidia.com/mig-1g.10gb", "cpu"]


def reference_demand(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Models: whole GPUs of the nodeSelector's model, MIG slices their own; every weight 1."""
    whole_model = (spec.get("nodeSelector") or {}).get(MODEL_LABEL) or "unspecified"
    by_model: dict[str, int] = {}
    for resource in RESOURCES:
        if resource == "cpu":
            continue
        n = reference_request(spec, resource)
        if n:
            model = "mig-1g.10gb" if resource.startswith("nvidia.com/mig-") else whole_model
            by_model[model] = by_model.get(model, 0) + n
    return {"total": sum(by_model.values()), "by_model": by_model}


# -- generated pod specs -------------------------------------------------------------------------------


@st.composite
def resources(draw: st.DrawFn) -> dict[str, Any]:
    asked = draw(st.dictionaries(st.sampled_from(RESOURCES), st.integers(0, 8), max_size=3))
    # Extended resources: a limit, a request equal to it, or both (the apiserver requires them equal).
    where = draw(st.sampled_from(["limits", "requests", "both"]))
    as_text = draw(st.booleans())
    values = {r: str(n) if as_text else n for r, n in asked.items()}
    if where == "both":
        return {"limits": values, "requests": dict(values)}
    return {where: values}


@st.composite
def containers(draw: st.DrawFn, *, init: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "c", "image": "x"}
    if draw(st.booleans()):
        container["resources"] = draw(resources())
    if init and draw(st.booleans()):
        container["restartPolicy"] = "Always"
    return container


@st.composite
def pod_specs(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(st.lists(containers(init=False), min_size=1, max_size=3))}
    inits = draw(st.lists(containers(init=True), max_size=4))
    if inits:
        spec["initContainers"] = inits
    if draw(st.integers(0, 4)) == 0:
        spec["overhead"] = {"nvidia.com/gpu": str(draw(st.integers(0, 2)))}
    model = draw(st.sampled_from([None, "h100", "a100"]))
    if model:
        spec["nodeSelector"] = {MODEL_LABEL: model}
    return spec


def _normal(amount: Mapping[str, Any]) -> dict[str, Any]:
    return {"total": amount["total"], "by_model": {m: n for m, n in amount["by_model"].items() if n}}


# -- Python ----------------------------------------------------------------------------------------------


@given(pod_specs())
@settings(max_examples=400, deadline=None)
def test_python_demand_is_the_reference_effective_request(spec: dict[str, Any]) -> None:
    assert _normal(pod_demand(spec, CONFIG).to_document()) == reference_demand(spec)


@given(pod_specs())
@settings(max_examples=200, deadline=None)
def test_python_effective_request_per_resource(spec: dict[str, Any]) -> None:
    for resource in RESOURCES:
        assert effective_request(spec, resource) == reference_request(spec, resource)


def test_the_textbook_cases() -> None:
    gpu = "nvidia.com/gpu"

    def c(n: int, **extra: Any) -> dict[str, Any]:
        return {"name": "c", "resources": {"limits": {gpu: str(n)}}, **extra}

    assert effective_request({"containers": [c(1)], "initContainers": [c(8)]}, gpu) == 8
    assert (
        effective_request({"containers": [c(1)], "initContainers": [c(2, restartPolicy="Always")]}, gpu) == 3
    )
    sidecar_then_init = {"containers": [c(0)], "initContainers": [c(2, restartPolicy="Always"), c(4)]}
    assert effective_request(sidecar_then_init, gpu) == 6
    init_then_sidecar = {"containers": [c(0)], "initContainers": [c(4), c(2, restartPolicy="Always")]}
    assert effective_request(init_then_sidecar, gpu) == 4
    assert effective_request({"containers": [c(2)], "overhead": {gpu: "1"}}, gpu) == 3


def test_weights_and_dra_classes() -> None:
    config = GpuCounting(
        gpu_resources=("nvidia.com/gpu",),
        mig_resource_prefix="nvidia.com/mig-",
        gpu_resource_weights={"nvidia.com/mig-": 0, "nvidia.com/mig-7g.80gb": 4},
        dra_device_classes={
            "gpu.nvidia.com": DraDeviceClass(),
            "a100.nvidia.com": DraDeviceClass(model="a100", weight=2),
        },
    )
    spec = {
        "nodeSelector": {MODEL_LABEL: "h100"},
        "containers": [
            {"name": "m", "resources": {"limits": {"nvidia.com/mig-7g.80gb": 2, "nvidia.com/mig-1g.10gb": 3}}}
        ],
    }
    claims = [
        {
            "devices": {
                "requests": [{"name": "a", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2}}]
            }
        },
        {"devices": {"requests": [{"name": "b", "exactly": {"deviceClassName": "a100.nvidia.com"}}]}},
        {"devices": {"requests": [{"name": "n", "exactly": {"deviceClassName": "nic.example.com"}}]}},
    ]
    assert pod_demand(spec, config, claims=claims) == GpuAmount(
        total=8 + 0 + 2 + 2, by_model={"mig-7g.80gb": 2, "mig-1g.10gb": 3, "h100": 2, "a100": 1}
    )


@pytest.mark.parametrize(
    ("text", "value"), [("8", 8), (8, 8), ("1k", 1000), ("2Ki", 2048), ("500m", 0.5), ("1e3", 1000)]
)
def test_quantities(text: Any, value: float) -> None:
    assert quantity(text) == pytest.approx(value)


# -- Rego: the same specs through the pinned OPA ------------------------------------------------------------


@pytest.fixture(scope="module")
def opa() -> str:
    ensure_tools("opa")
    return binary("opa")


def _rego_demands(opa: str, specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    value: list[dict[str, Any]] = eval_policies(
        opa, "[data.labgate.lib.gpu.demand(s) | some s in input.specs]", {"specs": specs}
    )
    return value


@given(st.lists(pod_specs(), min_size=40, max_size=40))
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.data_too_large, HealthCheck.too_slow]
)
def test_rego_demand_equals_the_reference_and_python(opa: str, specs: list[dict[str, Any]]) -> None:
    for spec, rego in zip(specs, _rego_demands(opa, specs), strict=True):
        assert _normal(rego) == reference_demand(spec), spec
        assert _normal(rego) == _normal(pod_demand(spec, CONFIG).to_document()), spec


# -- where the Python computation is used ----------------------------------------------------------------


class _Reader:
    def __init__(self, objects: dict[tuple[str, str], dict[str, Any] | Exception]):
        self.objects = objects
        self.reads: list[tuple[str, str, str | None]] = []

    def list(self, kind: Any, *, namespace: str | None = None, label_selector: str | None = None) -> Any:
        raise AssertionError("claims a pod names are read by name")

    def get(self, kind: Any, name: str, *, namespace: str | None = None, timeout: float = 10) -> Any:
        self.reads.append((kind.kind, name, namespace))
        found = self.objects.get((kind.kind, name))
        if isinstance(found, Exception):
            raise found
        return found


def test_the_claims_a_pod_names_are_read_in_its_namespace() -> None:
    import asyncio

    from webhook.claims import ClaimFacts, claim_references

    class ForbiddenError(Exception):
        status = 403
        reason = "Forbidden"

    claim_spec = {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
    reader = _Reader(
        {
            ("ResourceClaimTemplate", "t"): {"spec": {"spec": claim_spec}},
            ("ResourceClaim", "c"): {"spec": claim_spec},
            ("ResourceClaim", "secret"): ForbiddenError(),
        }
    )
    templates = [
        {
            "path": "spec",
            "spec": {
                "resourceClaims": [
                    {"name": "a", "resourceClaimTemplateName": "t"},
                    {"name": "b", "resourceClaimName": "c"},
                    {"name": "c", "resourceClaimName": "gone"},
                    {"name": "d", "resourceClaimName": "secret"},
                ]
            },
        }
    ]
    assert claim_references(templates) == {
        ("ResourceClaimTemplate", "t"),
        ("ResourceClaim", "c"),
        ("ResourceClaim", "gone"),
        ("ResourceClaim", "secret"),
    }
    facts = asyncio.run(ClaimFacts(reader).for_templates("vision", templates))
    assert facts == {
        "ResourceClaimTemplate/t": {"found": True, "spec": claim_spec},
        "ResourceClaim/c": {"found": True, "spec": claim_spec},
        "ResourceClaim/gone": {
            "found": False,
            "reason": 'it does not exist in namespace "vision", or the cluster does not serve resource.k8s.io/v1',
        },
        "ResourceClaim/secret": {"found": False, "reason": "the API answered 403 Forbidden"},
    }
    assert {namespace for _, _, namespace in reader.reads} == {"vision"}
    assert asyncio.run(ClaimFacts(reader).for_templates("vision", [{"path": "spec", "spec": {}}])) == {}
