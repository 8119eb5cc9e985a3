"""A pod's GPU demand as the scheduler counts it: Kubernetes' effective request (pure).

The Rego library `labgate.lib.gpu` decides with the same rules; `tests/unit/gpu/test_gpu_demand.py`
feeds the same generated pod specs to both and to an independent reference implementation.

Per resource r that labgate counts (config `gpu_resources`, and MIG resources starting with
`mig_resource_prefix`), a container asks `limits[r]`, else `requests[r]`, and the pod asks

    max(sum over containers and native sidecars (initContainers with restartPolicy Always),
        max over each plain init container i of (i + the sidecars started before it))
    + spec.overhead[r]

which is what `PodRequests` in Kubernetes' component-helpers computes and the scheduler reserves.
It has no pod-level term: pod-level resources (`spec.resources`, Kubernetes 1.34) support cpu,
memory and hugepages only, and the apiserver refuses a pod (or a built-in workload's template)
naming any other resource there (`Unsupported value`) before a webhook sees it; only CPU and memory
follow the pod-level request (`labgate.gpu_accounting.pod_requests`).
Whole GPUs are of the model `nodeSelector[gpu_model_label]` names (else "unspecified"); a MIG
resource is its own model (`nvidia.com/mig-1g.10gb` is `mig-1g.10gb`). `by_model` counts units; the
total counts each unit times its weight (`gpu_resource_weights`, 1 when unset). GPUs asked through
Dynamic Resource Allocation claims count too, given the claims' specs (`pod_demand`'s `claims`); the
reconciler counts them from what the scheduler allocated instead (`claim_allocations`).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from labgate.gpu_accounting.ledger import GpuAmount

UNSPECIFIED_MODEL = "unspecified"

# The policy config read by OPA as data.labgate.config; the Python side reads the GPU keys only.
DEFAULT_POLICY_CONFIG = Path(__file__).resolve().parents[2] / "policies" / "labgate" / "config" / "data.json"


class DraDeviceClass(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = ""  # "" = the pod's whole-GPU model (its nodeSelector)
    weight: int = 1


class GpuCounting(BaseModel):
    """The GPU keys of labgate's policy config (policies/labgate/config/data.json). Unset keys count
    NVIDIA's whole GPUs and MIG profiles (the shipped config lists more vendors)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    mig_resource_prefix: str = "nvidia.com/mig-"
    gpu_resource_weights: dict[str, int] = Field(default_factory=dict)
    gpu_model_label: str = "nvidia.com/gpu.product"
    dra_device_classes: dict[str, DraDeviceClass] = Field(default_factory=dict)

    @property
    def _mig_domain(self) -> str:
        parts = self.mig_resource_prefix.split("/")
        return "/".join(parts[:-1]) + "/" if len(parts) > 1 else ""

    def is_mig(self, resource: str) -> bool:
        return bool(self.mig_resource_prefix) and resource.startswith(self.mig_resource_prefix)

    def is_mig_model(self, model: str) -> bool:
        """Whether a model name (`mig-1g.10gb`) is a MIG profile's, not a whole GPU's."""
        return self.is_mig(f"{self._mig_domain}{model}")

    def is_counted(self, resource: str) -> bool:
        return resource in self.gpu_resources or self.is_mig(resource)

    def weight(self, resource: str) -> int:
        if resource in self.gpu_resource_weights:
            return self.gpu_resource_weights[resource]
        if self.is_mig(resource) and self.mig_resource_prefix in self.gpu_resource_weights:
            return self.gpu_resource_weights[self.mig_resource_prefix]
        return 1

    def model_of(self, spec: Mapping[str, Any], resource: str) -> str:
        if self.is_mig(resource):
            return resource.removeprefix(self._mig_domain)
        return whole_gpu_model(spec, self.gpu_model_label)


def load_gpu_counting(path: Path = DEFAULT_POLICY_CONFIG) -> GpuCounting:
    return GpuCounting.model_validate(json.loads(path.read_text()))


# A number (digits with at most one point) and a suffix: a decimal exponent ("e3", "E-3"), a decimal
# SI suffix ("m", "k", "E" for exa) or a binary one ("Ki", "Ei"). "E" and "Ei" begin like an exponent
# and are not one: the suffix table decides first.
_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))([eE][+-]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$")
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    **{s: Decimal(1024) ** (i + 1) for i, s in enumerate(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])},
}


def quantity(value: Any) -> Decimal:
    """A Kubernetes resource quantity ("8", 8, "1k") as a number; 0 for anything unreadable (the
    apiserver has validated quantities before admission)."""
    if isinstance(value, bool):
        return Decimal(0)
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        return Decimal(0)
    return _parsed_quantity(value)


@functools.lru_cache(maxsize=1024)
def _parsed_quantity(text: str) -> Decimal:
    """A quantity's text as a number. Cached: a cluster's pods repeat a few quantities ("1", "1Gi")
    on every watch event, and a Decimal is immutable, so one parse serves them all."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        return Decimal(0)
    number, suffix = match.group(1), match.group(2) or ""
    if suffix in _SUFFIX:
        return Decimal(number) * _SUFFIX[suffix]
    return Decimal(number + suffix)  # a decimal exponent


def _mapping(value: Any) -> Mapping[str, Any]:
    # A parsed object's fields are dicts or absent: both answered before the ABC's slower check.
    if type(value) is dict:
        return value
    return {} if value is None or not isinstance(value, Mapping) else value


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else []


def asked(container: Mapping[str, Any]) -> dict[str, Any]:
    """Resource -> quantity a container asks: its limit, else its request."""
    resources = _mapping(container.get("resources"))
    return {**_mapping(resources.get("requests")), **_mapping(resources.get("limits"))}


def is_sidecar(container: Mapping[str, Any]) -> bool:
    return container.get("restartPolicy") == "Always"


def effective_request(spec: Mapping[str, Any], resource: str) -> Decimal:
    """What the scheduler reserves of `resource` for a pod with this spec."""
    running = Decimal(0)
    for container in _sequence(spec.get("containers")):
        running += quantity(asked(_mapping(container)).get(resource, 0))
    sidecars = Decimal(0)
    init_peak = Decimal(0)
    for item in _sequence(spec.get("initContainers")):
        container = _mapping(item)
        own = quantity(asked(container).get(resource, 0))
        if is_sidecar(container):
            sidecars += own
            running += own
        else:
            init_peak = max(init_peak, own + sidecars)
    overhead = quantity(_mapping(spec.get("overhead")).get(resource, 0))
    return max(running, init_peak) + overhead


def whole_gpu_model(spec: Mapping[str, Any], model_label: str) -> str:
    model = _mapping(spec.get("nodeSelector")).get(model_label)
    return model if isinstance(model, str) and model else UNSPECIFIED_MODEL


def counted_resources(spec: Mapping[str, Any], config: GpuCounting) -> list[str]:
    names: set[str] = set()
    for group in ("containers", "initContainers"):
        for container in _sequence(spec.get(group)):
            names.update(r for r in asked(_mapping(container)) if config.is_counted(r))
    names.update(r for r in _mapping(spec.get("overhead")) if config.is_counted(r))
    return sorted(names)


def _whole(n: Decimal) -> int:
    return int(n.to_integral_value()) if n == n.to_integral_value() else int(n) + 1


def claim_demand(
    spec: Mapping[str, Any], claim_specs: Sequence[Mapping[str, Any]], config: GpuCounting
) -> list[tuple[str, int, int]]:
    """(model, count, gpus) for each device request of the given ResourceClaimSpecs that asks
    devices of a GPU device class (config dra_device_classes), the largest of its alternatives.
    Requests labgate cannot count are the policy's to refuse; they count nothing here."""
    found: list[tuple[str, int, int]] = []
    for claim_spec in claim_specs:
        for item in _sequence(_mapping(_mapping(claim_spec).get("devices")).get("requests")):
            request = _mapping(item)
            if isinstance(request.get("exactly"), Mapping):
                alternatives = [request["exactly"]]
            elif isinstance(request.get("firstAvailable"), list):
                alternatives = [_mapping(a) for a in request["firstAvailable"]]
            else:
                alternatives = [request]
            gpu = [a for a in alternatives if a.get("deviceClassName") in config.dra_device_classes]
            if not gpu or any(a.get("allocationMode", "ExactCount") == "All" for a in gpu):
                continue
            best = max(gpu, key=lambda a: int(a.get("count", 1)))
            cls = config.dra_device_classes[str(best["deviceClassName"])]
            n = int(best.get("count", 1))
            found.append((cls.model or whole_gpu_model(spec, config.gpu_model_label), n, n * cls.weight))
    return found


def pod_demand(
    spec: Mapping[str, Any],
    config: GpuCounting,
    *,
    claims: Sequence[Mapping[str, Any]] = (),
) -> GpuAmount:
    """A pod spec's GPUs, in total (weighted) and per model (units), as labgate.lib.gpu counts them.
    `claims`: the ResourceClaimSpecs the pod's spec.resourceClaims resolve to, when known."""
    total = 0
    by_model: dict[str, int] = {}
    for resource in counted_resources(spec, config):
        n = _whole(effective_request(spec, resource))
        if n <= 0:
            continue
        model = config.model_of(spec, resource)
        by_model[model] = by_model.get(model, 0) + n
        total += n * config.weight(resource)
    for model, n, gpus in claim_demand(spec, claims, config):
        by_model[model] = by_model.get(model, 0) + n
        total += gpus
    return GpuAmount(total=total, by_model=by_model)
