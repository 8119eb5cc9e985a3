"""The cosign signatures stored for an image digest in its registry: the simple-signing layers of the
legacy `.sig` tag and the Sigstore bundles attached to the digest as OCI referrers, fetched within the
provenance settings' bounds (how many signatures, how many bytes each). Fetching only: which of the
tenant's keys signed the digest is webhook.provenance.facts' question (cosign.verify), and what is
fetched is cached there.
"""

from __future__ import annotations

import asyncio

from webhook.provenance import cosign
from webhook.provenance.cosign import Bundle, SimpleSigning
from webhook.provenance.credentials import RegistryCredential
from webhook.provenance.registry import RegistryClient, Repository
from webhook.provenance.settings import ProvenanceSettings


class StoredSignatures:
    """Fetches the signatures stored for a digest through one RegistryClient."""

    def __init__(self, registry: RegistryClient, settings: ProvenanceSettings):
        self._registry = registry
        self._settings = settings

    async def of(
        self, repository: Repository, digest: str, credentials: list[RegistryCredential]
    ) -> tuple[cosign.Signature, ...]:
        """Every cosign signature stored for `digest`: the `.sig` tag and Sigstore bundle referrers."""
        legacy, bundles = await asyncio.gather(
            self._legacy(repository, digest, credentials),
            self._bundles(repository, digest, credentials),
        )
        return (*legacy, *bundles)

    async def _legacy(
        self, repository: Repository, digest: str, credentials: list[RegistryCredential]
    ) -> list[cosign.Signature]:
        manifest = await self._registry.manifest_if_exists(
            repository, cosign.signature_tag(digest), credentials
        )
        if manifest is None:
            return []
        layers = cosign.simple_signing_layers(manifest.document())[: self._settings.max_signatures]
        payloads = await asyncio.gather(
            *(
                self._registry.blob(
                    repository, layer.digest, credentials, max_bytes=self._settings.max_signature_bytes
                )
                for layer in layers
            )
        )
        return [
            SimpleSigning(
                payload=payload,
                signature=layer.annotations[cosign.SIGNATURE_ANNOTATION],
                certificate=layer.annotations.get(cosign.CERTIFICATE_ANNOTATION),
            )
            for layer, payload in zip(layers, payloads, strict=True)
        ]

    async def _bundles(
        self, repository: Repository, digest: str, credentials: list[RegistryCredential]
    ) -> list[cosign.Signature]:
        referrers = await self._registry.referrers(
            repository, digest, credentials, artifact_type=cosign.is_bundle_media_type
        )

        async def bundles_of(referrer_digest: str) -> list[cosign.Signature]:
            manifest = await self._registry.manifest(repository, referrer_digest, credentials)
            layers = cosign.bundle_layers(manifest.document())[:1]
            contents = await asyncio.gather(
                *(
                    self._registry.blob(
                        repository, layer.digest, credentials, max_bytes=self._settings.max_signature_bytes
                    )
                    for layer in layers
                )
            )
            return [Bundle(content) for content in contents]

        found = await asyncio.gather(
            *(bundles_of(r.digest) for r in referrers[: self._settings.max_signatures])
        )
        return [signature for group in found for signature in group]
