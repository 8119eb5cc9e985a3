"""What a live pod holds of GPUs, by Kubernetes' own effective-request rules (pure).

The admission policy (Rego, `labgate.lib.gpu`) decides a pod's GPU demand when it is created, and
that number is what the ledger records. The reconciler needs its own count only for pods that have
neither a reservation nor a record: after the settled-pods store was deleted, or for pods created
while the webhook was bypassed. It counts them as the scheduler does (the larger of the containers
plus sidecars and of each init container with the sidecars started before it; a limit stands for
the request), which is never less than what the policy counts, so a rebuilt sum errs towards
refusing.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from labgate.core.gpu_ledger import GpuAmount

_SUFFIXES = {
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
}


@dataclass(frozen=True)
class GpuCounting:
    """Which resources are GPUs (policies/labgate/config/data.json holds the same values)."""

    resources: frozenset[str] = frozenset({"nvidia.com/gpu"})
    mig_resource_prefix: str = "nvidia.com/mig-"
    model_label: str = "nvidia.com/gpu.product"
    preemptible_label: str = "labgate.io/preemptible"
    preemptible_priority_class: str = "research-preemptible"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> GpuCounting:
        """From labgate's policy configuration (data.labgate.config)."""
        defaults = cls()
        return cls(
            resources=frozenset(config.get("gpu_resources") or defaults.resources),
            mig_resource_prefix=str(config.get("mig_resource_prefix", defaults.mig_resource_prefix)),
            model_label=str(config.get("gpu_model_label", defaults.model_label)),
            preemptible_label=str(config.get("preemptible_label", defaults.preemptible_label)),
            preemptible_priority_class=str(
                config.get("preemptible_priority_class", defaults.preemptible_priority_class)
            ),
        )


def quantity(value: Any) -> int:
    """A resource quantity as a whole number, rounded up ("2", 2, "1k"); 0 when it does not parse."""
    text = str(value).strip()
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix):
            text, factor = text[: -len(suffix)], _SUFFIXES[suffix]
            break
    else:
        factor = 1
    try:
        amount = Decimal(text) * factor
    except InvalidOperation:
        return 0
    whole = int(amount)
    return whole + 1 if amount > whole else whole


def _asks(container: dict[str, Any], counting: GpuCounting, model: str) -> dict[str, int]:
    resources = container.get("resources") or {}
    asked = {**(resources.get("requests") or {}), **(resources.get("limits") or {})}
    found: dict[str, int] = {}
    for resource, value in asked.items():
        if resource in counting.resources:
            key = model
        elif counting.mig_resource_prefix and resource.startswith(counting.mig_resource_prefix):
            key = resource.split("/", 1)[-1]
        else:
            continue
        if (count := quantity(value)) > 0:
            found[key] = found.get(key, 0) + count
    return found


def _add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


def _max(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: max(a.get(k, 0), b.get(k, 0)) for k in {*a, *b}}


def pod_gpus(pod: dict[str, Any], counting: GpuCounting) -> GpuAmount:
    """The GPUs a pod holds, per model (whole GPUs take the model of nodeSelector[model label])."""
    spec = pod.get("spec") or {}
    model = (spec.get("nodeSelector") or {}).get(counting.model_label) or "unspecified"
    containers: dict[str, int] = {}
    for container in spec.get("containers") or []:
        containers = _add(containers, _asks(container, counting, model))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or []:
        asks = _asks(container, counting, model)
        if container.get("restartPolicy") == "Always":  # a sidecar: runs beside what follows
            sidecars = _add(sidecars, asks)
            init_peak = _max(init_peak, sidecars)
        else:
            init_peak = _max(init_peak, _add(sidecars, asks))
    by_model = {k: v for k, v in _max(_add(containers, sidecars), init_peak).items() if v > 0}
    return GpuAmount(total=sum(by_model.values()), by_model=by_model)


def is_admitted_preemptible(pod: dict[str, Any], counting: GpuCounting) -> bool:
    """A pod labgate admitted beyond quota as preemptible: it holds no reservation (see gpu_quota)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    priority_class = (pod.get("spec") or {}).get("priorityClassName")
    return bool(
        labels.get(counting.preemptible_label) == "true"
        and priority_class == counting.preemptible_priority_class
    )
