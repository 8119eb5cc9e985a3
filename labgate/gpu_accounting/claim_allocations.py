"""The GPUs Dynamic Resource Allocation claims hold, from what the scheduler allocated (pure).

The admission policy judges a pod's claims by what they ask (`labgate.lib.dra`); the cluster's truth is
what the scheduler wrote into each claim's `status.allocation`: one result per device, naming the
request (`<request>` or `<request>/<subrequest>` for `firstAvailable`) it was allocated for. The
settlement counts a pod's DRA GPUs from the allocated claims reserved for it (`status.reservedFor`),
so that the usage a Tenant shows is what the scheduler gave, even if a claim was swapped after the
pod was admitted (which `dra-claim-in-use` refuses to tenants, not to the platform). A claim shared
by several pods counts for each, as the policy counts it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.ledger import GpuAmount


@dataclass(frozen=True)
class AllocatedDevices:
    """Devices of one GPU device class allocated to a claim: `model` "" is the model of the pod's
    whole GPUs (the class maps to none, as `dra_device_classes` says)."""

    model: str
    count: int
    gpus: int


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def request_classes(claim_spec: Mapping[str, Any]) -> dict[str, str]:
    """The device class of each request a result can name: "<request>" for an `exactly` request
    (or an older flat one), "<request>/<subrequest>" for each `firstAvailable` alternative."""
    classes: dict[str, str] = {}
    for item in _list(_mapping(claim_spec.get("devices")).get("requests")):
        request = _mapping(item)
        name = str(request.get("name", ""))
        if isinstance(request.get("exactly"), Mapping):
            classes[name] = str(request["exactly"].get("deviceClassName", ""))
        elif isinstance(request.get("firstAvailable"), list):
            for sub in request["firstAvailable"]:
                classes[f"{name}/{_mapping(sub).get('name', '')}"] = str(
                    _mapping(sub).get("deviceClassName", "")
                )
        else:
            classes[name] = str(request.get("deviceClassName", ""))
    return classes


def allocated_devices(claim: Mapping[str, Any], config: GpuCounting) -> tuple[AllocatedDevices, ...]:
    """The GPU devices the scheduler allocated to `claim`, per device class; () when it is not
    allocated. Results of classes labgate does not count as GPUs count nothing."""
    classes = request_classes(_mapping(claim.get("spec")))
    allocation = _mapping(_mapping(claim.get("status")).get("allocation"))
    per_class: dict[str, int] = {}
    for item in _list(_mapping(allocation.get("devices")).get("results")):
        device_class = classes.get(str(_mapping(item).get("request", "")), "")
        if device_class in config.dra_device_classes:
            per_class[device_class] = per_class.get(device_class, 0) + 1
    return tuple(
        AllocatedDevices(
            model=config.dra_device_classes[c].model,
            count=n,
            gpus=n * config.dra_device_classes[c].weight,
        )
        for c, n in sorted(per_class.items())
    )


def consumers(claim: Mapping[str, Any]) -> list[str]:
    """The uids of the pods the claim is reserved for (`status.reservedFor`)."""
    return [
        str(entry["uid"])
        for entry in _list(_mapping(claim.get("status")).get("reservedFor"))
        if isinstance(entry, Mapping) and entry.get("resource") == "pods" and entry.get("uid")
    ]


def pod_allocations(
    claims: Iterable[Mapping[str, Any]], config: GpuCounting
) -> dict[str, tuple[AllocatedDevices, ...]]:
    """Pod uid -> the GPU devices allocated to the claims reserved for it."""
    found: dict[str, tuple[AllocatedDevices, ...]] = {}
    for claim in claims:
        devices = allocated_devices(claim, config)
        if not devices:
            continue
        for uid in consumers(claim):
            found[uid] = found.get(uid, ()) + devices
    return found


def allocated_amount(devices: Iterable[AllocatedDevices], whole_model: str) -> GpuAmount:
    """`devices` as an amount; a class mapped to no model counts as the pod's `whole_model`."""
    total = 0
    by_model: dict[str, int] = {}
    for found in devices:
        model = found.model or whole_model
        by_model[model] = by_model.get(model, 0) + found.count
        total += found.gpus
    return GpuAmount(total=total, by_model=by_model)


def at_least(recorded: GpuAmount, truth: GpuAmount) -> GpuAmount:
    """The larger of the two, total and per model: a record never falls below what the pod holds."""
    models = set(recorded.by_model) | set(truth.by_model)
    return GpuAmount(
        total=max(recorded.total, truth.total),
        by_model={m: max(recorded.count(m), truth.count(m)) for m in models},
    )
