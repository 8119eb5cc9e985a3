"""Image facts for the policies: for each image a pod names, what it is (normalised reference, digest)
and which of the tenant's keys signed it, or why labgate could not tell.

Facts are gathered, not judged: Rego (`labgate.rules.image`) decides. The webhook puts them in the
policy input as `input.images[<reference as written>]`:

    {"reference": "nginx", "normalized": "docker.io/library/nginx:latest", "registry": "docker.io",
     "repository": "library/nginx", "tag": "latest", "digest": "sha256:...", "signed_by": ["release"],
     "error": null}

Cost control: a tag's digest is reused for `tag_ttl_seconds`, the signatures found for a digest for
`signature_ttl_seconds` (`unsigned_ttl_seconds` while none of the tenant's keys verifies them), each
cache bounded to `cache_max_entries`; concurrent admissions asking about the same image share one set
of registry round trips; each image has a budget of its registry's timeout. What was learned with one
set of pull credentials is reused only for requests that present the same ones. Errors are never
cached, and never raised: an image labgate could not check carries `error`, which the policy refuses.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field

from labgate.core.coalesce import Coalescer
from labgate.core.expiring_cache import ExpiringCache
from webhook.policy_input import ImageFactDocument
from webhook.provenance import cosign
from webhook.provenance.cosign import SimpleSigning, TrustedKey
from webhook.provenance.credentials import PullCredentials, RegistryCredential
from webhook.provenance.reference import ImageReference, InvalidReferenceError, parse_reference
from webhook.provenance.registry import RegistryClient, RegistryError, Repository
from webhook.provenance.settings import ProvenanceSettings
from webhook.provenance.signatures import StoredSignatures

log = logging.getLogger(__name__)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SigningKey(BaseModel):
    """One entry of a Tenant's `spec.images.signingKeys`."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    name: str
    public_key: str = Field(alias="publicKey")


class ImageFact(BaseModel):
    """What labgate knows about one image reference (the shape of `input.images[<reference>]`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reference: str = Field(description="The reference as written in the pod spec.")
    normalized: str | None = Field(description="registry/repository[:tag][@digest], Docker's rules.")
    registry: str | None
    repository: str | None
    tag: str | None = Field(description="The tag, `latest` when none was written; null if only a digest.")
    digest: str | None = Field(description="The digest written, or the one the tag resolved to.")
    signed_by: list[str] = Field(description="Names of the tenant's keys with a valid signature of digest.")
    error: str | None = Field(description="Why labgate could not check the image; null when it could.")


def trusted_keys(signing_keys: Sequence[SigningKey]) -> list[TrustedKey]:
    """The tenant's keys that load; a key that does not is logged and trusted for nothing."""
    keys = []
    for entry in signing_keys:
        try:
            keys.append(cosign.load_trusted_key(entry.name, entry.public_key))
        except cosign.InvalidKeyError as err:
            log.warning("%s; it verifies no signature", err)
    return keys


def images_input(facts: dict[str, ImageFact]) -> dict[str, ImageFactDocument]:
    """`input.images` for OPA: reference as written -> fact (ImageFact's fields are
    ImageFactDocument's, without `pinned`)."""
    return {reference: cast(ImageFactDocument, fact.model_dump()) for reference, fact in facts.items()}


def _signature_identity(signature: cosign.Signature) -> str:
    digest = hashlib.sha256()
    if isinstance(signature, SimpleSigning):
        digest.update(b"simple\0" + signature.payload + b"\0" + signature.signature.encode())
    else:
        digest.update(b"bundle\0" + signature.content)
    return digest.hexdigest()


# (registry, repository, tag or digest, fingerprints of the credentials presented): what was learned
# with one pull secret is only reused for requests that present the same one, so a pod without access
# to a private repository never learns its digests or signatures from another tenant's admission.
_TagKey = tuple[str, str, str, str]
_DigestKey = tuple[str, str, str, str]


class ImageFacts:
    """Gathers ImageFacts through one RegistryClient, with the caches and budgets described above."""

    def __init__(
        self,
        registry: RegistryClient,
        settings: ProvenanceSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.registry = registry
        self.settings = settings
        self._stored = StoredSignatures(registry, settings)
        self._tags: ExpiringCache[_TagKey, str] = ExpiringCache(settings.cache_max_entries, clock)
        self._signatures: ExpiringCache[_DigestKey, tuple[cosign.Signature, ...]] = ExpiringCache(
            settings.cache_max_entries, clock
        )
        self._verified: ExpiringCache[tuple[str, str, str], bool] = ExpiringCache(
            4 * settings.cache_max_entries, clock
        )
        self._flights: Coalescer[Hashable, Any] = Coalescer()

    async def gather(
        self,
        references: Iterable[str],
        *,
        credentials: PullCredentials | None = None,
        signing_keys: Sequence[SigningKey] = (),
        timeout: float | None = None,
    ) -> dict[str, ImageFact]:
        """Facts for every distinct reference, gathered concurrently. Signatures are looked for only
        when `signing_keys` is not empty. `timeout` caps each registry's budget (the time left before
        the admission deadline). Never raises for a registry's or an image's sake."""
        keys = trusted_keys(signing_keys)
        distinct = list(dict.fromkeys(references))
        facts = await asyncio.gather(
            *(
                self.fact(r, credentials=credentials or PullCredentials(), keys=keys, timeout=timeout)
                for r in distinct
            )
        )
        return dict(zip(distinct, facts, strict=True))

    async def fact(
        self,
        text: str,
        *,
        credentials: PullCredentials,
        keys: Sequence[TrustedKey],
        timeout: float | None = None,
    ) -> ImageFact:
        """The fact about one reference as written."""
        try:
            reference = parse_reference(text)
        except InvalidReferenceError as err:
            return ImageFact(
                reference=text,
                normalized=None,
                registry=None,
                repository=None,
                tag=None,
                digest=None,
                signed_by=[],
                error=str(err),
            )
        budget = self.settings.timeout_for(reference.registry)
        if timeout is not None:
            budget = min(budget, timeout)
        digest: str | None = reference.digest
        error: str | None = None
        signed_by: list[str] = []
        try:
            async with asyncio.timeout(budget):
                candidates = credentials.for_image(reference)
                if digest is None:
                    digest = await self._resolve(reference, candidates)
                if keys:
                    signed_by = await self._signed_by(reference, digest, candidates, keys)
        except TimeoutError:
            error = f"registry {reference.registry} did not answer within {round(budget, 2)}s"
        except RegistryError as err:
            error = err.reason
        except Exception as err:  # a bug must refuse the image, not admit it or fail the request
            log.exception("checking image %s failed", text)
            error = f"labgate could not check the image ({type(err).__name__})"
        return ImageFact(
            reference=text,
            normalized=reference.normalized,
            registry=reference.registry,
            repository=reference.repository,
            tag=reference.tag,
            digest=digest,
            signed_by=signed_by if error is None else [],
            error=error,
        )

    # --- steps, each cached and shared between concurrent callers ---

    async def _shared(self, key: Hashable, work: Callable[[], Awaitable[V]]) -> V:
        """Run `work` once for all concurrent callers with the same key; a caller that gives up (its
        budget ran out) does not cancel it for the others."""
        result: V = await self._flights.run(key, work)
        return result

    async def _resolve(self, reference: ImageReference, credentials: list[RegistryCredential]) -> str:
        assert reference.tag is not None
        key: _TagKey = (reference.registry, reference.repository, reference.tag, _credential_ids(credentials))
        cached = self._tags.get(key)
        if cached is not None:
            return cached[0]

        async def resolve() -> str:
            repository = Repository(reference.registry, reference.repository)
            manifest = await self.registry.manifest(repository, reference.tag or "", credentials)
            self._tags.put(key, manifest.digest, self.settings.tag_ttl_seconds)
            return manifest.digest

        return await self._shared(("tag", *key), resolve)

    async def _signed_by(
        self,
        reference: ImageReference,
        digest: str,
        credentials: list[RegistryCredential],
        keys: Sequence[TrustedKey],
    ) -> list[str]:
        key: _DigestKey = (reference.registry, reference.repository, digest, _credential_ids(credentials))
        cached = self._signatures.get(key)
        if cached is not None:
            signatures, age = cached
            signed_by = self._verify(signatures, digest, keys)
            if signed_by or age < self.settings.unsigned_ttl_seconds:
                return signed_by

        async def fetch() -> tuple[cosign.Signature, ...]:
            found = await self._stored.of(
                Repository(reference.registry, reference.repository), digest, credentials
            )
            self._signatures.put(key, found, self.settings.signature_ttl_seconds)
            return found

        signatures = await self._shared(("signatures", *key), fetch)
        return self._verify(signatures, digest, keys)

    def _verify(
        self, signatures: Sequence[cosign.Signature], digest: str, keys: Sequence[TrustedKey]
    ) -> list[str]:
        """Names of `keys` (in their order) that signed `digest` in any of `signatures`."""
        signed: set[str] = set()
        for signature in signatures:
            identity = _signature_identity(signature)
            for key in keys:
                memo = (identity, digest, key.fingerprint)
                hit = self._verified.get(memo)
                if hit is None:
                    ok = key.name in cosign.verify(signature, image_digest=digest, keys=[key])
                    self._verified.put(memo, ok, self.settings.signature_ttl_seconds)
                else:
                    ok = hit[0]
                if ok:
                    signed.add(key.name)
        return [k.name for k in keys if k.name in signed]


def _credential_ids(credentials: list[RegistryCredential]) -> str:
    return ",".join(c.fingerprint for c in credentials)
