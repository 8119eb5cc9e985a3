"""Image facts for one admission request: which images a request's pods run, with which pull
credentials, checked against which of the tenant's keys; the result is `input.images`.

Only tenants with a `spec.images` section are checked (and pinned): a tenant without image rules
costs no registry round trip. Pull secrets and service accounts are read through the Kubernetes door
with a short cache, since every pod of a Job asks for the same ones.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from labgate.core.api_resources import SERVICE_ACCOUNT, Kind
from labgate.core.kube import ApiException, KubeApi
from webhook.policy_input import ImageFactDocument
from webhook.provenance.credentials import pull_credentials
from webhook.provenance.facts import ImageFacts, SigningKey, images_input
from webhook.provenance.reference import InvalidReferenceError, parse_reference, spec_images

SECRET = Kind("Secret", "", "v1", "secrets", is_namespaced=True)
KUBE_CACHE_SECONDS = 30.0


def template_images(pod_templates: Iterable[dict[str, Any]]) -> list[str]:
    """Every image the templates run (containers and image volumes), in order, once each."""
    images: dict[str, None] = {}
    for template in pod_templates:
        images.update(dict.fromkeys(spec_images(template.get("spec"))))
    return list(images)


def _pull_secret_names(spec: dict[str, Any]) -> list[str]:
    return [s["name"] for s in spec.get("imagePullSecrets") or [] if isinstance(s, dict) and s.get("name")]


def with_pinned(images: dict[str, ImageFactDocument]) -> dict[str, ImageFactDocument]:
    """Add `pinned` (registry/repository@digest) to each fact that has a digest, for the mutation."""
    out: dict[str, ImageFactDocument] = {}
    for reference, fact in images.items():
        pinned, digest = None, fact.get("digest")
        if digest and not fact.get("error"):
            try:
                pinned = parse_reference(reference).pinned(digest)
            except InvalidReferenceError:
                pinned = None
        out[reference] = {**fact, "pinned": pinned}
    return out


class ImageGatherer:
    """Builds `input.images` for requests in tenants that have image rules."""

    def __init__(self, facts: ImageFacts, kube: KubeApi):
        self.facts = facts
        self.kube = kube
        self._objects: dict[tuple[str, str, str], tuple[float, dict[str, Any] | None]] = {}

    def _get_cached(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        key = (kind.kind, namespace, name)
        hit = self._objects.get(key)
        now = time.monotonic()
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            obj = self.kube.get(kind, name, namespace=namespace)
        except ApiException:
            obj = None
        if len(self._objects) > 4096:
            self._objects.clear()
        self._objects[key] = (now + KUBE_CACHE_SECONDS, obj)
        return obj

    def _credential_secrets(self, namespace: str, templates: list[dict[str, Any]]) -> list[dict[str, Any]]:
        names: dict[str, None] = {}
        for template in templates:
            spec = template.get("spec") or {}
            for name in _pull_secret_names(spec):
                names[name] = None
            account = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
            service_account = self._get_cached(SERVICE_ACCOUNT, namespace, account) or {}
            for name in _pull_secret_names(service_account):
                names[name] = None
        secrets = [self._get_cached(SECRET, namespace, name) for name in names]
        return [s for s in secrets if s is not None]

    async def images_for(
        self,
        *,
        namespace: str,
        tenant_spec: dict[str, Any],
        pod_templates: list[dict[str, Any]],
        timeout: float,
    ) -> dict[str, ImageFactDocument] | None:
        """`input.images`, or None when the tenant has no image rules (nothing is checked)."""
        images_spec = tenant_spec.get("images")
        references = template_images(pod_templates)
        if not images_spec or not references:
            return None
        secrets = await asyncio.to_thread(self._credential_secrets, namespace, pod_templates)
        keys = [SigningKey.model_validate(k) for k in images_spec.get("signingKeys") or []]
        facts = await self.facts.gather(
            references, credentials=pull_credentials(secrets), signing_keys=keys, timeout=timeout
        )
        return with_pinned(images_input(facts))
