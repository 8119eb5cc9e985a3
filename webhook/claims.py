"""Dynamic Resource Allocation facts: the ResourceClaims and ResourceClaimTemplates a request's pod
templates name (spec.resourceClaims), read through from the API for the policy (input.resource_claims).

Pods that name claims are rare, so a read per claim on their admission costs less than watching every
claim of the cluster. Whatever cannot be read is reported as such, and the policy refuses the pod
(gpu-dra-unsupported) rather than counting its claims as free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from labgate.core.api_resources import RESOURCE_CLAIM, RESOURCE_CLAIM_TEMPLATE, Kind
from webhook.read_shares import Read, unshared
from webhook.references import claim_references

__all__ = ["ClaimFacts", "claim_fact", "claim_references", "missing_fact"]

# How long one read may take: the whole admission has 2.5 s.
READ_TIMEOUT_SECONDS = 1.0


def claim_fact(kind: str, obj: Mapping[str, Any]) -> dict[str, Any]:
    """What the policy gets of a claim that was read: its ResourceClaimSpec (a template's spec.spec)."""
    spec = obj.get("spec") or {}
    if kind == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    return {"found": True, "spec": spec}


def missing_fact(reason: str) -> dict[str, Any]:
    return {"found": False, "reason": reason}


class ObjectReader(Protocol):
    def get(
        self, kind: Kind, name: str, *, namespace: str | None = None, timeout: float = 10
    ) -> dict[str, Any] | None: ...


_KINDS = {"ResourceClaim": RESOURCE_CLAIM, "ResourceClaimTemplate": RESOURCE_CLAIM_TEMPLATE}


class ClaimFacts:
    """Reads the claims a request's pod templates name, in the request's namespace."""

    def __init__(self, reader: ObjectReader, *, timeout: float = READ_TIMEOUT_SECONDS):
        self.reader = reader
        self.timeout = timeout

    def _read(self, namespace: str, kind: str, name: str) -> dict[str, Any]:
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
    ) -> dict[str, dict[str, Any]]:
        """{"<kind>/<name>": fact} for every claim the templates name; {} when they name none.
        `read` runs each read (in the request's tenant's share of the pool: webhook/read_shares.py)."""
        references = sorted(claim_references(pod_templates))
        facts = await asyncio.gather(*(read(self._read, namespace, kind, name) for kind, name in references))
        return {f"{kind}/{name}": fact for (kind, name), fact in zip(references, facts, strict=True)}
