"""An object the cluster holds, as it was when admitted: what the audit judges (pure).

The audit (cli.policy_impact) evaluates existing objects as if they were applied again. A
field the platform set after admission is no part of what the requester asked, and must not be
held against them:

- the binding: the scheduler writes a Pod's spec.nodeName through the pods/binding subresource,
  after every webhook ran. That write is not recorded in metadata.managedFields (the binding
  bypasses field management), while a nodeName the requester sent is, under their manager. So a
  nodeName no manager owns is the binding, and taken out; one a manager owns is the requester's,
  and kept (placement-node-name judges it). An object without managedFields (a snapshot written by
  `kubectl get -o yaml`) keeps its nodeName: who set it cannot be told.

Fields defaulted by the apiserver and by its admission plugins that run before the webhooks (the
ServiceAccount token volume, DefaultTolerationSeconds, the resolved priority), and labgate's own
mutations, were already there when labgate's validating webhook decided; the audit sees them as it
did, and the mutation, idempotent, adds nothing again.
"""

from __future__ import annotations

import copy
from typing import Any

Manifest = dict[str, Any]


def _is_pod(obj: Manifest) -> bool:
    return obj.get("kind") == "Pod" and str(obj.get("apiVersion", "")) == "v1"


def _managed_entries(obj: Manifest) -> list[Manifest] | None:
    entries = (obj.get("metadata") or {}).get("managedFields")
    if not isinstance(entries, list):
        return None
    return [e for e in entries if isinstance(e, dict)]


def has_requested_field(entries: list[Manifest], path: tuple[str, ...]) -> bool:
    """Whether a manager of the object itself (not of a subresource) owns the field at `path`."""
    for entry in entries:
        if entry.get("subresource"):
            continue
        fields: Any = entry.get("fieldsV1")
        for name in path:
            fields = fields.get(f"f:{name}") if isinstance(fields, dict) else None
        if fields is not None:
            return True
    return False


def is_bound_by_scheduler(obj: Manifest) -> bool:
    """Whether a Pod's spec.nodeName is the scheduler's binding (no manager of the Pod sent it)."""
    node = (obj.get("spec") or {}).get("nodeName")
    entries = _managed_entries(obj)
    if not _is_pod(obj) or not node or entries is None:
        return False
    return not has_requested_field(entries, ("spec", "nodeName"))


def as_admitted(obj: Manifest) -> Manifest:
    """`obj` without the fields the platform set after it was admitted (a copy when any is taken out)."""
    if not is_bound_by_scheduler(obj):
        return obj
    admitted = copy.deepcopy(obj)
    del admitted["spec"]["nodeName"]
    return admitted
