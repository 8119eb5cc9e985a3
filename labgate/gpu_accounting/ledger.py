"""The GPU quota ledger (pure): what each tenant uses or has reserved, across all of its namespaces.

One ConfigMap per tenant in labgate's namespace, the ledger, holds two things: the GPUs of the
tenant's settled pods as one sum, and a reservation per pod admitted but not yet settled. Webhook
replicas change it only by compare-and-swap on its resourceVersion, so two replicas admitting pods
at the quota boundary cannot both spend the last GPUs: the loser re-reads, re-decides and may be
refused. Because settled pods are a sum, the ledger stays small however many pods a tenant runs,
and an admission costs the same for a tenant of ten pods and one of ten thousand.

A reservation is made when the validating webhook admits a GPU pod. The reconciler settles it when
the pod appears: it records the pod's GPUs in its own per-pod store (`labgate.gpu_accounting.settled_pods`, which
the webhook never reads) and then, in one compare-and-swap of the ledger, drops the reservation and
adds the GPUs to the sum. It recomputes the sum from that store when pods are deleted or finish. A
reservation whose pod never appears (the create failed after admission) is dropped once it has
expired (seconds: `RESERVATION_TTL_SECONDS`). Until then it counts: an unsettled reservation
over-counts for a moment rather than ever letting the quota be exceeded.

Reservations and settled pods are keyed by the uid the apiserver gave the pod (validating webhooks
see it on CREATE), never by its name: a second CREATE of a name that exists (the apiserver asks the
webhooks before it finds the name taken) gets a uid of its own, so its reservation matches no pod
and expires, and it can never rewrite the count of the live pod that holds the name. A pod which
came and went before the reconciler read its reservation is released at once: the reconciler
remembers the uids of pods it saw deleted.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from labgate.core.api_resources import Kind, Object
from labgate.core.errors import LabgateError, NoDecisionError
from labgate.core.gpu_amount import GpuAmount as GpuAmount  # noqa: PLC0414 (re-exported: the ledger's amounts)
from labgate.core.gpu_amount import sum_of
from labgate.core.tenant import TENANT_LABEL

CONFIG_MAP = Kind("ConfigMap", "", "v1", "configmaps", is_namespaced=True)
LEDGER_LABEL = "labgate.io/gpu-ledger"
# How long a reservation waits for its pod: the apiserver stores the pod right after the validating
# webhook admits it, so a pod that has not appeared within seconds never will (a failed create, a
# duplicate name). Short, so that a request that creates nothing cannot hold GPUs for long.
RESERVATION_TTL_SECONDS = 10.0
# A ConfigMap holds at most 1 MiB of data; keep a margin for the object's metadata.
LEDGER_MAX_BYTES = 1_000_000
FINISHED_PHASES = frozenset({"Succeeded", "Failed"})


class Reservation(BaseModel):
    """GPUs held for a pod admitted but not yet settled, until `expires` (wall-clock seconds).
    Ledgers of an earlier format may carry `state` and `pod_uid` too: they are ignored (such
    reservations expired long ago, and settling drops them)."""

    model_config = ConfigDict(frozen=True)

    gpus: GpuAmount
    expires: float = 0.0
    pod: str = ""  # "<namespace>/<name>" of the pod the request would create, for people and checks


class Ledger(BaseModel):
    """One tenant's GPU usage: its settled pods' sum and its reservations, keyed by the uid of the
    pod each was made for."""

    model_config = ConfigDict(frozen=True)

    tenant: str
    resource_version: str | None = None
    reservations: dict[str, Reservation] = Field(default_factory=dict)
    settled: GpuAmount = Field(default_factory=GpuAmount)
    # The settled-pods store's shard versions the sum was computed from: a reconciler that takes
    # over reads those shards afresh unless its cache is at least that new.
    settled_versions: dict[str, str] = Field(default_factory=dict)
    # What the tenant's live pods ask of CPU (millicores), memory (bytes) and pod slots, summed by
    # the reconciler from the pods it watches (labgate.gpu_accounting.pod_requests): the usage the
    # tenant-quota rule reads; kept for tenants with a limit only. Not reserved per pod like GPUs
    # (see docs/architecture.md, "Tenant-wide CPU, memory and pod limits").
    workloads: dict[str, int] = Field(default_factory=dict)


def ledger_name(tenant: str) -> str:
    return f"labgate-gpu-ledger.{tenant}"


def pod_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def usage(ledger: Ledger, *, excluding: str | None = None) -> GpuAmount:
    """GPUs in use or reserved, optionally not counting one reservation (a pod admitted again)."""
    held = (r.gpus for key, r in ledger.reservations.items() if key != excluding)
    return sum_of((ledger.settled, *held))


def with_reservation(
    ledger: Ledger,
    pod_uid: str,
    gpus: GpuAmount,
    *,
    now: float,
    pod: str = "",
    ttl: float = RESERVATION_TTL_SECONDS,
) -> Ledger:
    """The ledger with a fresh reservation for the pod whose uid is `pod_uid` (named `pod`)."""
    reservation = Reservation(gpus=gpus, expires=now + ttl, pod=pod)
    return ledger.model_copy(update={"reservations": {**ledger.reservations, pod_uid: reservation}})


def settle(
    ledger: Ledger,
    settled_pods: dict[str, GpuAmount],
    *,
    pod_phases: dict[str, str],
    now: float,
    gone_pod_uids: Collection[str] = (),
    unrecorded: dict[str, GpuAmount] | None = None,
    gated: Collection[str] = (),
) -> tuple[Ledger, dict[str, GpuAmount]]:
    """The ledger and the settled pods after the reconciler looked at the pods, all keyed by pod uid.

    A reservation whose pod exists moves to the settled pods; one whose pod finished is dropped, and
    so is one whose pod never appeared before it expired or was seen deleted. Settled pods that were
    deleted or finished are dropped. `unrecorded` holds live pods that have neither a record nor a
    reservation (their GPUs counted from their specs): they are recorded, so that a store that was
    deleted, or pods created while the webhook was bypassed, are counted again. The ledger's sum is
    recomputed from the settled pods. `pod_phases` maps existing pods' uids to their phase;
    `gone_pod_uids` holds the uids of pods seen deleted (recently enough to matter).

    `gated` holds the live pods behind Kueue's admission gate: they hold no GPUs, so none is settled
    (a record from before the webhook reserved at the gate's removal is dropped). A reservation of
    one is kept as it is, expired or not: it was made when the gate's removal was admitted, and the
    pod shown gated is either a watch that lags behind that update (settled once it shows the pod
    ungated) or an update that failed (Kueue tries again, and the retry replaces it); it goes with
    the pod."""
    settled = {
        uid: gpus
        for uid, gpus in settled_pods.items()
        if (phase := pod_phases.get(uid)) is not None and phase not in FINISHED_PHASES and uid not in gated
    }
    kept: dict[str, Reservation] = {}
    for uid, reservation in ledger.reservations.items():
        phase = pod_phases.get(uid)
        if phase is None:
            if reservation.expires > now and uid not in gone_pod_uids:
                kept[uid] = reservation  # admitted an instant ago; the pod is on its way
            continue
        if phase not in FINISHED_PHASES and uid in gated:
            kept[uid] = reservation
        elif phase not in FINISHED_PHASES:
            # Only the request that created this very pod (its uid) made this reservation.
            settled[uid] = reservation.gpus
    for uid, gpus in (unrecorded or {}).items():
        if (phase := pod_phases.get(uid)) is not None and phase not in FINISHED_PHASES and uid not in gated:
            settled.setdefault(uid, gpus)
    updated = ledger.model_copy(update={"reservations": kept, "settled": sum_of(settled.values())})
    return updated, settled


class LedgerCorruptError(NoDecisionError, ValueError):
    """A tenant's ledger ConfigMap does not parse (edited by hand?): its GPU pods are refused until
    it is fixed, rather than admitted against an unknown usage."""

    def __init__(self, tenant: str, problem: str):
        super().__init__(
            f"the GPU ledger of tenant {tenant!r} (ConfigMap {ledger_name(tenant)}) is unreadable: {problem}"
        )
        self.tenant = tenant


def ledger_from_config_map(tenant: str, config_map: Object | None) -> Ledger:
    if config_map is None:
        return Ledger(tenant=tenant)
    data = config_map.get("data") or {}
    try:
        return Ledger(
            tenant=tenant,
            resource_version=config_map.get("metadata", {}).get("resourceVersion"),
            reservations=_RESERVATIONS.validate_json(data.get("reservations") or "{}"),
            settled=_AMOUNT.validate_json(data.get("settled") or "{}"),
            settled_versions=_VERSIONS.validate_json(data.get("settledVersions") or "{}"),
            workloads=_WORKLOADS.validate_json(data.get("workloads") or "{}"),
        )
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise LedgerCorruptError(tenant, f"{first['msg']}" + (f" at {where}" if where else "")) from err


def config_map_from_ledger(ledger: Ledger, *, namespace: str) -> Object:
    metadata: dict[str, Any] = {
        "name": ledger_name(ledger.tenant),
        "namespace": namespace,
        "labels": {
            LEDGER_LABEL: "true",
            TENANT_LABEL: ledger.tenant,
            "app.kubernetes.io/managed-by": "labgate",
        },
    }
    if ledger.resource_version is not None:
        metadata["resourceVersion"] = ledger.resource_version
    data = {
        "reservations": encode_reservations(ledger.reservations),
        "settled": _AMOUNT.dump_json(ledger.settled).decode(),
        "settledVersions": _VERSIONS.dump_json(ledger.settled_versions).decode(),
    }
    if ledger.workloads:
        data["workloads"] = _WORKLOADS.dump_json(ledger.workloads).decode()
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


# Reservations are read and written in one call into pydantic's compiled core: a ledger of 8,000
# pods takes milliseconds, where a model per entry took some 50 ms each way.
_RESERVATIONS: TypeAdapter[dict[str, Reservation]] = TypeAdapter(dict[str, Reservation])
_VERSIONS: TypeAdapter[dict[str, str]] = TypeAdapter(dict[str, str])
_AMOUNT: TypeAdapter[GpuAmount] = TypeAdapter(GpuAmount)
_WORKLOADS: TypeAdapter[dict[str, int]] = TypeAdapter(dict[str, int])


def encode_reservations(reservations: dict[str, Reservation]) -> str:
    """The reservations' stored form: compact JSON, defaults left out."""
    ordered = dict(sorted(reservations.items()))
    return _RESERVATIONS.dump_json(ordered, exclude_defaults=True).decode()


def stored_size(ledger: Ledger) -> int:
    """The size of the ledger's stored reservations, in bytes (the ledger holds only pods not yet
    settled, so this stays small while the reconciler runs)."""
    return len(encode_reservations(ledger.reservations))


def encoded_size(key: str, reservation: Reservation) -> int:
    """What one more reservation adds to the stored form, in bytes."""
    return len(_RESERVATIONS.dump_json({key: reservation}, exclude_defaults=True))


class LedgerConflictError(LabgateError, RuntimeError):
    """Someone else changed the ledger since it was read: re-read and decide again."""


def now() -> float:
    """Wall-clock seconds: reservations expire by wall time, since several processes share them."""
    return time.time()


def newer(a: str | None, b: str | None) -> bool:
    """Whether resourceVersion `a` is newer than `b` (etcd revisions are numbers in practice)."""
    if a is None or b is None or not a.isdigit() or not b.isdigit():
        return True
    return int(a) >= int(b)
