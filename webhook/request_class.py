"""What kind of admission request this is, answered once (pure): the one place that says whether a
request creates a pod, takes GPUs now, writes a Tenant, removes Kueue's admission gate, names a
volume or swaps a claim. `classify` runs once per request, right after its pod templates are found,
and every room after it (the facts, the reservations, the response) reads the answer it returns
instead of asking the request again.

    request_class = classify(request, policy_input["pod_templates"])
    request_class.takes_gpus_now, request_class.reservation_key, ...
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from labgate.gpu_accounting.pod_gpus import is_behind_admission_gate
from webhook.review import AdmissionRequest


@dataclass(frozen=True)
class RequestClass:
    """The answers `classify` gives for one request; each field is documented by its function below."""

    is_pod_create: bool
    is_scale_up: bool
    is_tenant_update: bool
    is_tenant_write: bool
    is_gate_removal: bool
    takes_gpus_now: bool
    needs_gpu_usage: bool
    reservation_key: str
    swapped_claim: tuple[str, str] | None
    claimed_volume: str | None


def classify(request: AdmissionRequest, pod_templates: Sequence[Mapping[str, Any]]) -> RequestClass:
    """Every answer about `request` the admission path needs, computed once."""
    gate_removal = is_admission_gate_removal(request)
    pod_create = is_pod_create(request)
    scale_up = is_scale_up(request)
    return RequestClass(
        is_pod_create=pod_create,
        is_scale_up=scale_up,
        is_tenant_update=is_tenant_update(request),
        is_tenant_write=is_tenant_write(request),
        is_gate_removal=gate_removal,
        takes_gpus_now=pod_create or gate_removal,
        needs_gpu_usage=gate_removal or scale_up or _needs_gpu_usage_otherwise(request, pod_templates),
        reservation_key=reservation_key(request),
        swapped_claim=swapped_claim(request),
        claimed_volume=claimed_volume(request),
    )


def is_pod_create(request: AdmissionRequest) -> bool:
    return request.kind.group == "" and request.kind.kind == "Pod" and request.operation == "CREATE"


def takes_gpus_now(request: AdmissionRequest) -> bool:
    """A request after which its pod may hold GPUs: a Pod CREATE, or the removal of Kueue's admission
    gate (a pod created behind it reserved nothing). What it reserves is the policy's `demand`, which
    is nothing for a pod created behind the gate."""
    return is_pod_create(request) or is_admission_gate_removal(request)


def reservation_key(request: AdmissionRequest) -> str:
    """What a GPU pod's reservation is keyed by: the uid the apiserver gave the pod it is creating.
    Never the pod's name: a CREATE of a name that exists is validated before the apiserver finds the
    name taken, and must not touch the reservation or record of the pod that holds it. (Without a uid,
    which a real apiserver always sends to validating webhooks, a key no pod can ever have.)"""
    uid = (request.object or {}).get("metadata", {}).get("uid")
    return str(uid) if uid else f"no-pod-uid/{request.uid}"


def _scale_replicas(scale: Mapping[str, Any] | None) -> int:
    spec = (scale or {}).get("spec")
    replicas = spec.get("replicas") if isinstance(spec, Mapping) else None
    return replicas if isinstance(replicas, int) else 0


def is_scale_up(request: AdmissionRequest) -> bool:
    """A scale call (the Scale subresource, `kubectl scale`) that raises the replica count: the
    policies get the workload's pod templates (`input.scaled_workload`) and the tenant's GPU usage,
    to judge the growth (gpu-quota-scale). A scale down needs neither."""
    if request.sub_resource != "scale" or request.operation != "UPDATE":
        return False
    return _scale_replicas(request.object) > _scale_replicas(request.old_object)


def is_tenant_update(request: AdmissionRequest) -> bool:
    """A change to a Tenant: the policies get its own GPU usage (`input.gpu_usage`), so a quota
    lowered below it is said (tenant-quota-below-usage)."""
    return (request.kind.group, request.kind.kind, request.operation) == ("labgate.io", "Tenant", "UPDATE")


def is_tenant_write(request: AdmissionRequest) -> bool:
    """A Tenant created or changed (not its status): the policies get what the nodes of its pools
    hold, read live, so a quota beyond them is said when applied (tenant-quota-beyond-pools)."""
    return (
        (request.kind.group, request.kind.kind) == ("labgate.io", "Tenant")
        and request.operation in ("CREATE", "UPDATE")
        and not request.sub_resource
    )


def is_admission_gate_removal(request: AdmissionRequest) -> bool:
    """A Pod UPDATE that removes Kueue's admission gate: from now on the pod can be scheduled, so its
    GPUs are judged against the quota and reserved, as at a CREATE (lib.gpu.judged_pod_template)."""
    return (
        (request.kind.group, request.kind.kind, request.operation) == ("", "Pod", "UPDATE")
        and not request.sub_resource
        and is_behind_admission_gate(request.old_object)
        and not is_behind_admission_gate(request.object)
    )


def needs_gpu_usage(request: AdmissionRequest, pod_templates: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the policies get the tenant's GPU usage (`input.gpu_usage`): a Pod being created or let
    through Kueue's admission gate (the quota is checked and reserved), a workload with pod
    templates being created (its pods that will wait for GPUs are announced at apply time), and a
    workload's replica count changed, by an UPDATE or a scale up (what it adds is judged against
    what is free: gpu-quota-scale; its own pods are counted already)."""
    if is_admission_gate_removal(request) or is_scale_up(request):
        return True
    return _needs_gpu_usage_otherwise(request, pod_templates)


def _needs_gpu_usage_otherwise(request: AdmissionRequest, pod_templates: Sequence[Mapping[str, Any]]) -> bool:
    if request.operation == "UPDATE" and not request.sub_resource:
        return bool(pod_templates) and (request.kind.group, request.kind.kind) != ("", "Pod")
    return request.operation == "CREATE" and (
        (request.kind.group == "" and request.kind.kind == "Pod") or bool(pod_templates)
    )


def swapped_claim(request: AdmissionRequest) -> tuple[str, str] | None:
    """(kind, name) of a ResourceClaim or ResourceClaimTemplate being created or deleted: one a live
    pod names may not be swapped under it (dra-claim-in-use), so the policy needs its users."""
    if request.kind.group != "resource.k8s.io" or request.operation not in ("CREATE", "DELETE"):
        return None
    if request.kind.kind not in ("ResourceClaim", "ResourceClaimTemplate") or request.sub_resource:
        return None
    name = request.name or ((request.object or {}).get("metadata") or {}).get("name")
    return (request.kind.kind, name) if isinstance(name, str) and name else None


def claimed_volume(request: AdmissionRequest) -> str | None:
    """The PersistentVolume a claim names (spec.volumeName), for the volume-claim rule."""
    if (request.kind.group, request.kind.kind) != ("", "PersistentVolumeClaim"):
        return None
    name = ((request.object or {}).get("spec") or {}).get("volumeName")
    return name if isinstance(name, str) and name else None
