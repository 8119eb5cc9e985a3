"""Pure: a Tenant's status as the reconciler writes it (namespaces, the Ready condition, GPU usage,
what the nodes of its pools hold and the QuotaFitsPools condition, the nodes a pod without
tolerations can land on), and whether the live status already says it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from labgate.core.tenant import MAX_UNSCHEDULED_NAMES, Tenant
from labgate.gpu_accounting.ledger import GpuAmount
from rbac.desired import is_subset
from rbac.tenant_view import gpu_summary, held_text


@dataclass(frozen=True)
class PodCounts:
    """The tenant's unfinished preemptible pods' GPUs, its pods admitted that do not run yet, and
    its GPU pods the scheduler has not bound yet, (name, GPUs) in name order: they hold quota while
    they wait for a node; (with Kueue) its workloads queued for quota and the GPUs they ask."""

    preemptible: int
    pending: int
    unscheduled: tuple[tuple[str, int], ...] = ()
    queued_workloads: int | None = None
    queued_gpus: int | None = None


def shown_usage(live: Mapping[str, Any]) -> GpuAmount:
    """The usage the live status shows (kept while the ledger is unreadable)."""
    shown = (live.get("status") or {}).get("gpu") or {}
    return GpuAmount(total=shown.get("used") or 0, by_model=shown.get("usedByModel") or {})


def namespace_states(namespaces: list[str], phases: Mapping[str, str]) -> list[dict[str, str]]:
    """Each namespace with its phase (Pending until the namespace is seen)."""
    return [{"name": ns, "state": phases.get(ns, "Pending")} for ns in namespaces]


def ready_condition(
    tenant: Tenant,
    namespaces: list[str],
    states: list[dict[str, str]],
    held_elsewhere: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Ready once every namespace is Active (without its lastTransitionTime); never while a namespace
    the Tenant lists is held by another tenant (`held_elsewhere`, name to tenant), which it does not
    take (rbac.tenant_controller.held_by_other_tenants)."""
    if held_elsewhere:
        shown = ", ".join(f"{n} (labelled for tenant {o})" for n, o in sorted(held_elsewhere.items()))
        return {
            "type": "Ready",
            "status": "False",
            "observedGeneration": tenant.generation,
            "reason": "NamespaceHeldByAnotherTenant",
            "message": f"lists namespaces another tenant holds: {shown}. Fix: remove them from "
            "spec.namespaces.names, or have a cluster admin move them back once their work is done",
        }
    ready = all(s["state"] == "Active" for s in states)
    return {
        "type": "Ready",
        "status": "True" if ready else "False",
        "observedGeneration": tenant.generation,
        "reason": "Provisioned" if ready else "NamespacesPending",
        "message": f"{len(namespaces)} namespaces provisioned"
        if ready
        else "waiting for namespaces to become Active",
    }


def gpu_status(
    tenant: Tenant, gpus: GpuAmount, counts: PodCounts, pools: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """status.gpu; `pools`: what the nodes of its pools hold per model (status.gpu.pools), if known."""
    # An empty map or list is left out: server-side apply turns one emptied of the keys it owned
    # into null, which the schema refuses, and the status would stay stuck at its old usage.
    held = sum(n for _, n in counts.unscheduled)
    names = [name for name, _ in counts.unscheduled]
    summary = gpu_summary(
        total=tenant.spec.gpu.total,
        models=tenant.spec.gpu.models,
        used_total=gpus.total,
        used_by_model=gpus.by_model,
    )
    return {
        "used": gpus.total,
        **({"usedByModel": dict(gpus.by_model)} if gpus.by_model else {}),
        "summary": f"{summary}; {held_text(held, names)}" if names else summary,
        "preemptible": counts.preemptible,
        "pendingPods": counts.pending,
        "heldByUnscheduled": held,
        **({"unscheduledPods": names[:MAX_UNSCHEDULED_NAMES]} if names else {}),
        **({"pools": dict(pools)} if pools else {}),
        # With Kueue only: without it nothing is ever queued, and the columns stay empty.
        **(
            {"queuedWorkloads": counts.queued_workloads, "queuedGpus": counts.queued_gpus or 0}
            if counts.queued_workloads is not None
            else {}
        ),
    }


def tenant_status(
    tenant: Tenant,
    namespaces: list[str],
    phases: Mapping[str, str],
    gpus: GpuAmount,
    counts: PodCounts,
    *,
    pools: Mapping[str, Any] | None = None,
    nodes: Mapping[str, Any] | None = None,
    held_elsewhere: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The status (without conditions) and the Ready condition (without its transition time);
    `pools`: status.gpu.pools (rbac.tenant_controller, from labgate.gpu_accounting.pool_capacity);
    `nodes`: status.nodes, the cluster's nodes a pod without tolerations can land on
    (rbac.node_taints.open_nodes), left out while unknown; `held_elsewhere`: see ready_condition."""
    states = namespace_states(namespaces, phases)
    status = {
        "observedGeneration": tenant.generation,
        "namespaceList": ",".join(namespaces),
        "namespaces": states,
        "gpu": gpu_status(tenant, gpus, counts, pools),
        **({"nodes": dict(nodes)} if nodes is not None else {}),
    }
    return status, ready_condition(tenant, namespaces, states, held_elsewhere)


def old_condition(old_status: Mapping[str, Any], kind: str = "Ready") -> dict[str, Any]:
    """The live status's condition of type `kind` ({} when it has none)."""
    return next((c for c in old_status.get("conditions") or [] if c.get("type") == kind), {})


def old_ready_condition(old_status: Mapping[str, Any]) -> dict[str, Any]:
    return old_condition(old_status, "Ready")


def are_conditions_unchanged(conditions: Sequence[Mapping[str, Any]], old_status: Mapping[str, Any]) -> bool:
    """True if the live status has exactly these conditions' types, each saying what it says."""
    old_types = {c.get("type") for c in old_status.get("conditions") or []}
    return old_types == {c["type"] for c in conditions} and all(
        all(old_condition(old_status, c["type"]).get(k) == v for k, v in c.items()) for c in conditions
    )


def is_unchanged(
    status: dict[str, Any],
    condition: dict[str, Any] | Sequence[dict[str, Any]],
    old_status: Mapping[str, Any],
) -> bool:
    """True if the live status already says all of `status` and the condition(s) (Ready, and
    QuotaFitsPools when labgate knows the pools' nodes)."""
    old_gpu = old_status.get("gpu") or {}
    gpu = status["gpu"]
    conditions = [condition] if isinstance(condition, dict) else list(condition)
    return (
        is_subset({k: v for k, v in status.items() if k not in ("gpu", "nodes")}, old_status)
        # Whole: a key it no longer says (moreTaintKeys, taintKeys) is a change too.
        and old_status.get("nodes") == status.get("nodes")
        and (old_gpu.get("used"), old_gpu.get("usedByModel") or {})
        == (gpu["used"], gpu.get("usedByModel", {}))
        and all(
            old_gpu.get(key) == gpu.get(key)
            for key in (
                "summary",
                "preemptible",
                "pendingPods",
                "queuedWorkloads",
                "queuedGpus",
                "heldByUnscheduled",
            )
        )
        and (old_gpu.get("unscheduledPods") or []) == gpu.get("unscheduledPods", [])
        and (old_gpu.get("pools") or {}) == gpu.get("pools", {})
        and are_conditions_unchanged(conditions, old_status)
    )


def with_transition_time(
    condition: dict[str, Any], old_status: Mapping[str, Any], now: str
) -> dict[str, Any]:
    """The condition with its lastTransitionTime: kept while its status stays the same, else `now`."""
    old = old_condition(old_status, condition["type"])
    kept = old.get("status") == condition["status"] and "lastTransitionTime" in old
    return {**condition, "lastTransitionTime": old["lastTransitionTime"] if kept else now}
