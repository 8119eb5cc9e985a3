"""A tenant's GPU usage counted from its live pods, for a refusal at the quota's edge (pure).

The ledger's settled sum moves when the reconciler sees a pod go (at most a second or so later, at
its settlement pace). A researcher who deletes a pod (`kubectl delete pod p2 --wait`) and at once
creates another would be refused by the count of the pod that is gone. So before the webhook says
`gpu-quota` it counts again from the API: the ledger read first, then the pods of the tenant's
namespaces listed (both quorum reads), and the usage is

    the GPUs of every live pod that holds them (not finished, not preemptible, not behind Kueue's
    gate) + every reservation of the ledger whose pod is not listed and has not expired, or whose
    pod is still behind the gate (its removal was admitted and reserved; the settlement keeps it)

Every pod admitted before the ledger was read is in it: as a reservation (its pod not created yet,
or created and then counted once, by its uid) or settled (its pod created, so listed). A pod admitted
after that read changed the ledger, so the compare-and-swap that would reserve against this count
fails and the request is decided again. The count is therefore never below the truth at the
ledger's version, which is the only version it is used with (`webhook.reservations`).

GPUs allocated to Dynamic Resource Allocation claims are counted by the reconciler from what the
scheduler allocated, which a pod's spec does not say: a tenant with a live pod that names claims is
not counted here (None), and its refusal stands until the reconciler releases what went.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from labgate.core.gpu_amount import GpuAmount, sum_of
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.ledger import FINISHED_PHASES, Ledger
from labgate.gpu_accounting.pod_gpus import is_admitted_preemptible, is_behind_admission_gate, pod_gpus


def _holds(pod: Mapping[str, Any], gpus: GpuAmount) -> bool:
    """A live pod that holds GPUs the quota counts."""
    phase = (pod.get("status") or {}).get("phase")
    return (
        gpus.total > 0
        and phase not in FINISHED_PHASES
        and not is_admitted_preemptible(pod)
        and not is_behind_admission_gate(pod)
    )


def _names_claims(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("resourceClaims"))


@dataclass(frozen=True)
class LiveCount:
    """A count of the tenant's live pods against a ledger: the usage (see the module's docstring)
    and the part of it that is reservations of pods the list lacks (`unlisted_reservations`)."""

    usage: GpuAmount
    unlisted: GpuAmount


def count_live(
    ledger: Ledger, pods: Iterable[Mapping[str, Any]], counting: GpuCounting, *, now: float | None = None
) -> LiveCount | None:
    """`live_usage` and `unlisted_reservations` in one pass over `pods`, which may be a stream (the
    pages of a list): what is kept of a pod is its uid, and the pod itself only when the ledger
    holds a reservation for it, so a tenant of 10,000 pods is counted a page at a time. None when a
    pod names DRA claims."""
    moment = time.time() if now is None else now
    counted: list[GpuAmount] = []
    listed: set[str] = set()
    reserved_pods: dict[str, Mapping[str, Any]] = {}
    for pod in pods:
        if _names_claims(pod):
            return None
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        listed.add(uid)
        if uid in ledger.reservations:
            reserved_pods[uid] = pod
        gpus = pod_gpus(pod, counting)
        if uid and _holds(pod, gpus):
            counted.append(gpus)
    reserved = (
        reservation.gpus
        for uid, reservation in ledger.reservations.items()
        if _reservation_holds(reserved_pods.get(uid), expires=reservation.expires, now=moment)
    )
    return LiveCount(usage=sum_of((*counted, *reserved)), unlisted=_unlisted(ledger, listed, moment))


def live_usage(
    ledger: Ledger, pods: Iterable[Mapping[str, Any]], counting: GpuCounting, *, now: float | None = None
) -> GpuAmount | None:
    """The tenant's usage from `pods` (every pod of its namespaces, listed after `ledger` was read) and
    the ledger's reservations; None when a pod names DRA claims (see the module's docstring)."""
    counted = count_live(ledger, pods, counting, now=now)
    return None if counted is None else counted.usage


def unlisted_reservations(
    ledger: Ledger, pods: Iterable[Mapping[str, Any]], *, now: float | None = None
) -> GpuAmount:
    """The part of the usage that is reservations of pods the list lacks (unexpired): pods not
    created yet, or created and deleted before the reconciler settled them. The API cannot tell the
    two apart; the reconciler, which saw a pod go, releases its reservation at once."""
    listed = {str((pod.get("metadata") or {}).get("uid") or "") for pod in pods}
    return _unlisted(ledger, listed, time.time() if now is None else now)


def _unlisted(ledger: Ledger, listed: set[str], now: float) -> GpuAmount:
    return sum_of(
        reservation.gpus
        for uid, reservation in ledger.reservations.items()
        if uid not in listed and reservation.expires > now
    )


def _reservation_holds(pod: Mapping[str, Any] | None, *, expires: float, now: float) -> bool:
    """Whether a reservation counts beside the live pods: its pod not created yet (until it expires),
    or behind Kueue's gate (reserved when the gate's removal was admitted; the settlement keeps it)."""
    if pod is None:
        return expires > now
    phase = (pod.get("status") or {}).get("phase")
    return phase not in FINISHED_PHASES and is_behind_admission_gate(pod)
