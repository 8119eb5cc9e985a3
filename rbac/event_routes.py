"""Which of the reconciler's queues a change to a watched object goes to (pure: a table); the
reconciler (rbac/reconciler.py) only hands the tenant's name to the queues it names.

| what changed                                         | tenant               | queues                  |
| ---------------------------------------------------- | -------------------- | ----------------------- |
| a Workload or a ResourceFlavor (with Kueue)          | (found by Kueue's)   | kueue                   |
| a Tenant's status only (or its bookkeeping metadata) | the Tenant's name    | status                  |
| any other change to a Tenant, listed or deleted      | the Tenant's name    | provisioning, settlement|
| a Namespace with the tenant label                    | its label            | provisioning, settlement|
| an object labgate manages, with the tenant label     | its label            | provisioning            |
| anything without the tenant label                    | none                 | none                    |
| a Namespace or managed object whose label changed    | its former label too | as for its old copy     |

A namespace joining or leaving a tenant changes which pods the tenant's GPUs count, hence the
settlement; a managed object (a RoleBinding, a quota, a NetworkPolicy) only its provisioning, which
repairs drift. A namespace the platform releases (takes the label off) or moves reaches the tenant it
left at once: its bindings there go now, not at the next resync. Pods, ledgers and settled-pods shards are routed by the settlement's own watch
(rbac/settlement_controller.py), not here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from labgate.core.api_resources import NAMESPACE, RESOURCE_FLAVOR, TENANT, WORKLOAD, Kind, Object
from labgate.core.tenant import TENANT_LABEL

# What a Tenant event may change without asking for a new provisioning pass (its status, written by
# the status controller, and bookkeeping of the API server).
_PROVISIONING_METADATA = ("generation", "finalizers", "deletionTimestamp", "labels", "annotations")


class Queue(StrEnum):
    PROVISIONING = "provisioning"
    SETTLEMENT = "settlement"
    STATUS = "status"
    KUEUE = "kueue"


@dataclass(frozen=True)
class Route:
    """The tenant a change concerns (None for Kueue's objects, whose routes find it) and its queues."""

    tenant: str | None
    queues: frozenset[Queue]


NOWHERE = Route(None, frozenset())
_TO_KUEUE = Route(None, frozenset({Queue.KUEUE}))


def is_status_only_change(old: Object | None, new: Object) -> bool:
    """True if a Tenant event changed nothing provisioning reads (e.g. its status was written)."""
    if old is None or old.get("spec") != new.get("spec"):
        return False
    before, after = old.get("metadata", {}), new.get("metadata", {})
    return all(before.get(field) == after.get(field) for field in _PROVISIONING_METADATA)


def route_of(kind: Kind, obj: Object, *, old: Object | None = None, is_event: bool = False) -> Route:
    """Where a change to `obj` goes. `old` is the cached copy before a watch event (`is_event`);
    a listed or deleted object has none."""
    if kind is WORKLOAD or kind is RESOURCE_FLAVOR:
        return _TO_KUEUE
    metadata = obj.get("metadata") or {}
    tenant = metadata.get("name") if kind is TENANT else (metadata.get("labels") or {}).get(TENANT_LABEL)
    if not isinstance(tenant, str) or not tenant:
        return NOWHERE
    if kind is TENANT and is_event and is_status_only_change(old, obj):
        return Route(tenant, frozenset({Queue.STATUS}))
    if kind is TENANT or kind is NAMESPACE:
        return Route(tenant, frozenset({Queue.PROVISIONING, Queue.SETTLEMENT}))
    return Route(tenant, frozenset({Queue.PROVISIONING}))


def _tenant_label(obj: Object) -> str | None:
    tenant = ((obj.get("metadata") or {}).get("labels") or {}).get(TENANT_LABEL)
    return tenant if isinstance(tenant, str) and tenant else None


def former_route(kind: Kind, obj: Object, *, old: Object | None) -> Route:
    """Where a watch event goes for the tenant a Namespace or managed object left: when the event
    changed or took off its tenant label, the route of its old copy; else NOWHERE."""
    if old is None or kind in (TENANT, WORKLOAD, RESOURCE_FLAVOR):
        return NOWHERE
    if _tenant_label(old) == _tenant_label(obj):
        return NOWHERE
    return route_of(kind, old)
