"""Dynamic Resource Allocation facts: the ResourceClaims and ResourceClaimTemplates a request's pod
templates name (spec.resourceClaims), read through from the API for the policy (input.resource_claims),
and, for a claim or template being created or deleted, the pods of its namespace that name it
(input.claim_users, rule dra-claim-in-use).

Pods that name claims are rare, so a read per claim on their admission costs less than watching every
claim of the cluster. Whatever cannot be read is reported as such, and the policy refuses the pod
(gpu-dra-unsupported) rather than counting its claims as free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from labgate.core.api_resources import POD, RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE, Kind
from webhook.policy_input import ClaimFactDocument, ClaimUserDocument, ClaimUsersDocument
from webhook.read_shares import Read, unshared
from webhook.references import claim_references

__all__ = ["ClaimFacts", "claim_fact", "claim_references", "claim_users", "missing_fact"]

# How long one read may take: the whole admission has 2.5 s.
READ_TIMEOUT_SECONDS = 1.0


def _claim_fields(pod: Mapping[str, Any], kind: str, name: str) -> list[str]:
    """Where `pod` names claim `kind`/`name`: its spec.resourceClaims, and for a ResourceClaim the
    claims generated for it from templates (status.resourceClaimStatuses)."""
    fields: list[str] = []
    key = "resourceClaimName" if kind == "ResourceClaim" else "resourceClaimTemplateName"
    spec = pod.get("spec")
    refs = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
    for i, ref in enumerate(refs if isinstance(refs, list) else []):
        if isinstance(ref, Mapping) and ref.get(key) == name:
            fields.append(f"spec.resourceClaims[{i}]")
    status = pod.get("status")
    generated = status.get("resourceClaimStatuses") if isinstance(status, Mapping) else None
    for i, entry in enumerate(generated if kind == "ResourceClaim" and isinstance(generated, list) else []):
        if isinstance(entry, Mapping) and entry.get("resourceClaimName") == name:
            fields.append(f"status.resourceClaimStatuses[{i}]")
    return fields


def claim_users(pods: Iterable[Mapping[str, Any]], kind: str, name: str) -> ClaimUsersDocument:
    """input.claim_users: the pods that name claim `kind`/`name`, with what decides whether they are
    live (the policy decides): {"pods": [{"name", "field", "phase", "is_deleting"}]}."""
    users: list[ClaimUserDocument] = []
    for pod in pods:
        fields = _claim_fields(pod, kind, name)
        if not fields:
            continue
        metadata = pod.get("metadata") or {}
        users.append(
            {
                "name": str(metadata.get("name", "")),
                "field": ", ".join(fields),
                "phase": str((pod.get("status") or {}).get("phase") or "Pending"),
                "is_deleting": bool(metadata.get("deletionTimestamp")),
            }
        )
    return {"pods": sorted(users, key=lambda user: user["name"])}


def claim_fact(kind: str, obj: Mapping[str, Any]) -> ClaimFactDocument:
    """What the policy gets of a claim that was read: its ResourceClaimSpec (a template's spec.spec)."""
    spec = obj.get("spec") or {}
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    return {"found": True, "spec": spec}


def missing_fact(reason: str) -> ClaimFactDocument:
    return {"found": False, "reason": reason}


class ObjectReader(Protocol):
    def get(
        self, kind: Kind, name: str, *, namespace: str | None = None, timeout: float = 10
    ) -> dict[str, Any] | None: ...

    def list(
        self, kind: Kind, *, namespace: str | None = None, label_selector: str | None = None
    ) -> dict[str, Any]: ...


_KINDS = {"ResourceClaim": RESOURCE_CLAIM, "ResourceClaimTemplate": RESOURCE_CLAIM_TEMPLATE}


class ClaimFacts:
    """Reads the claims a request's pod templates name, in the request's namespace."""

    def __init__(self, reader: ObjectReader, *, timeout: float = READ_TIMEOUT_SECONDS):
        self.reader = reader
        self.timeout = timeout

    def _read(self, namespace: str, kind: str, name: str) -> ClaimFactDocument:
        try:
            obj = self.reader.get(_KINDS[kind], name, namespace=namespace, timeout=self.timeout)
        except Exception as err:  # refused (the API said no, a timeout): never counted as free
            status = getattr(err, "status", None)
            if status is not None:
                return missing_fact(f"the API answered {status} {getattr(err, 'reason', '')}".rstrip())
            return missing_fact(f"reading it failed: {type(err).__name__}")
        if obj is None:
            return missing_fact(
                f'it does not exist in namespace "{namespace}", or the cluster does not serve '
                f"{_KINDS[kind].api_version}"
            )
        return claim_fact(kind, obj)

    async def for_templates(
        self, namespace: str, pod_templates: Iterable[Mapping[str, Any]], *, read: Read = unshared
    ) -> dict[str, ClaimFactDocument]:
        """{"<kind>/<name>": fact} for every claim the templates name; {} when they name none.
        `read` runs each read (in the request's tenant's share of the pool: webhook/read_shares.py)."""
        references = sorted(claim_references(pod_templates))
        facts = await asyncio.gather(*(read(self._read, namespace, kind, name) for kind, name in references))
        return {f"{kind}/{name}": fact for (kind, name), fact in zip(references, facts, strict=True)}

    def _users(self, namespace: str, kind: str, name: str) -> ClaimUsersDocument:
        try:
            pods = self.reader.list(POD, namespace=namespace).get("items") or []
        except Exception as err:  # refused, never "no users": deleting the claim could swap it
            status = getattr(err, "status", None)
            if status is not None:
                return {"error": f"the API answered {status} {getattr(err, 'reason', '')}".rstrip()}
            return {"error": f"listing them failed: {type(err).__name__}"}
        return claim_users(pods, kind, name)

    async def users_of(self, namespace: str, kind: str, name: str) -> ClaimUsersDocument:
        """input.claim_users for a claim (or template) being created or deleted: the pods of its
        namespace that name it. Listing the namespace's pods is one read, on a rare request."""
        return await asyncio.to_thread(self._users, namespace, kind, name)
