"""What a live pod holds of GPUs, for the reconciler's recount and the offline audit (pure).

The admission policy (Rego, `labgate.lib.gpu`) decides a pod's GPU demand when it is created, and
that number is what the ledger records. The reconciler needs its own count only for pods that have
neither a reservation nor a record: after the settled-pods store was deleted, or for pods created
while the webhook was bypassed. It is `labgate.gpu_accounting.demand.pod_demand` of the pod's spec, the
effective request the scheduler reserves (init containers, native sidecars, overhead, weights), the
same rules as the policy's; GPUs asked through Dynamic Resource Allocation claims are not counted
here: the settlement adds what the scheduler allocated to the pod's claims
(`labgate.gpu_accounting.claim_allocations`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labgate.core.tenant import PREEMPTIBLE_LABEL, PREEMPTIBLE_PRIORITY_CLASS
from labgate.gpu_accounting.demand import GpuCounting, pod_demand
from labgate.gpu_accounting.ledger import GpuAmount


def pod_gpus(pod: Mapping[str, Any], counting: GpuCounting) -> GpuAmount:
    """The GPUs a live pod holds, in total (weighted) and per model, as the scheduler counts them."""
    spec = pod.get("spec")
    return pod_demand(spec if isinstance(spec, Mapping) else {}, counting)


def is_admitted_preemptible(pod: Mapping[str, Any]) -> bool:
    """A pod labgate admitted beyond quota as preemptible: it holds no reservation (see gpu_quota)."""
    metadata = pod.get("metadata")
    labels = (metadata.get("labels") if isinstance(metadata, Mapping) else None) or {}
    spec = pod.get("spec")
    priority_class = spec.get("priorityClassName") if isinstance(spec, Mapping) else None
    return bool(labels.get(PREEMPTIBLE_LABEL) == "true" and priority_class == PREEMPTIBLE_PRIORITY_CLASS)


# Kueue's scheduling gate (lib.gpu.kueue_admission_gate in the policies).
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"


def is_behind_admission_gate(pod: Mapping[str, Any] | None) -> bool:
    """The pod carries Kueue's scheduling gate: it cannot be scheduled, so it holds no GPUs until Kueue
    admits it and removes the gate; the webhook reserves its GPUs then (see docs/architecture.md,
    "One quota, two enforcers")."""
    spec = (pod or {}).get("spec")
    gates = (spec.get("schedulingGates") if isinstance(spec, Mapping) else None) or []
    return any(isinstance(g, Mapping) and g.get("name") == KUEUE_ADMISSION_GATE for g in gates)
