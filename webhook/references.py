"""The objects a request's pod templates name that labgate reads to decide it (pure): DRA claims
(a read of the API each), the PersistentVolumes claim templates name (a read each) and, for tenants
with image rules, the images (a registry round trip each, behind a cache).

Their number is bounded per request (LABGATE_MAX_REFERENCES_PER_REQUEST): beyond it the request is
refused before anything is read, with the numbers, so that one tenant's requests cannot spend the
replica's threads and connections on hundreds of reads each (issue 19, finding 8).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from labgate.core.errors import LabgateError

# Generous for one workload (a pod names a few claims, images and volumes), far below what made one
# request cost 128 reads.
DEFAULT_MAX_REFERENCES = 32


def claim_references(pod_templates: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(kind, name) of every claim the templates name, kind "ResourceClaim" or "ResourceClaimTemplate"."""
    found: set[tuple[str, str]] = set()
    for template in pod_templates:
        spec = template.get("spec")
        claims = spec.get("resourceClaims") if isinstance(spec, Mapping) else None
        for ref in claims if isinstance(claims, list) else []:
            if not isinstance(ref, Mapping):
                continue
            if isinstance(ref.get("resourceClaimName"), str):
                found.add(("ResourceClaim", ref["resourceClaimName"]))
            elif isinstance(ref.get("resourceClaimTemplateName"), str):
                found.add(("ResourceClaimTemplate", ref["resourceClaimTemplateName"]))
    return found


def pull_credential_references(pod_templates: Iterable[Mapping[str, Any]]) -> set[tuple[str, str]]:
    """(kind, name) of the image pull secrets and service accounts the templates name (the pods'
    pull credentials, read to check images; a template without a service account uses "default")."""
    found: set[tuple[str, str]] = set()
    for template in pod_templates:
        spec = template.get("spec")
        if not isinstance(spec, Mapping):
            continue
        secrets = spec.get("imagePullSecrets")
        for secret in secrets if isinstance(secrets, list) else []:
            if isinstance(secret, Mapping) and isinstance(secret.get("name"), str):
                found.add(("Secret", secret["name"]))
        account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
        found.add(("ServiceAccount", str(account)))
    return found


@dataclass(frozen=True, slots=True)
class References:
    """How many objects of each sort one request has labgate read (each counted once)."""

    claims: int
    volumes: int
    images: int = 0
    credentials: int = 0

    @property
    def total(self) -> int:
        return self.claims + self.volumes + self.images + self.credentials

    def counts(self) -> dict[str, int]:
        """What a refusal quotes, sort -> number."""
        return {
            "ResourceClaims and ResourceClaimTemplates": self.claims,
            "PersistentVolumes of claim templates": self.volumes,
            "images checked against the tenant's image rules": self.images,
            "image pull secrets and service accounts": self.credentials,
        }


class TooManyReferencesError(LabgateError):
    """The request names more objects to read than the bound: refused before any is read."""

    def __init__(self, references: References, bound: int):
        super().__init__(f"{references.total} objects to read, above the bound of {bound}")
        self.references = references
        self.bound = bound
