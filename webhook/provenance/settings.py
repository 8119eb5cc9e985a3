"""How labgate talks to OCI registries and how long it trusts what it learned, from LABGATE_PROVENANCE_*
environment variables (lists and maps as JSON, e.g. LABGATE_PROVENANCE_INSECURE_REGISTRIES='["127.0.0.1:5000"]')."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from webhook.provenance.reference import normalize_registry


class ProvenanceSettings(BaseSettings):
    """Registry access (timeouts, TLS) and the image-facts cache."""

    model_config = SettingsConfigDict(env_prefix="LABGATE_PROVENANCE_", extra="forbid")

    registry_timeout_seconds: float = Field(
        default=1.0,
        gt=0,
        le=2.5,
        description="Budget for everything labgate asks one registry about one image (token, manifest, "
        "signatures); it must fit inside the admission deadline. Past it the image is unverifiable.",
    )
    registry_timeouts: dict[str, float] = Field(
        default_factory=dict,
        description="Per-registry budgets that override registry_timeout_seconds, keyed by registry host "
        '(with port), e.g. {"ghcr.io": 2.0}.',
    )
    ca_bundle: Path | None = Field(
        default=None,
        description="PEM bundle of extra certificate authorities for registries with private TLS "
        "certificates; the public roots are trusted as well.",
    )
    insecure_registries: list[str] = Field(
        default_factory=list,
        description="Registries spoken to over plain HTTP (a loopback or in-cluster test registry). "
        "Credentials are sent to them in clear text; never list a registry reached over a real network.",
    )
    tag_ttl_seconds: float = Field(
        default=30.0,
        ge=0,
        description="How long a tag's resolved digest is reused. A tag moved in the registry is seen "
        "after at most this long; the mutating webhook pins pods to the digest it resolved.",
    )
    signature_ttl_seconds: float = Field(
        default=600.0,
        ge=0,
        description="How long the signatures found for a digest are reused when one of the tenant's "
        "keys verified one of them.",
    )
    unsigned_ttl_seconds: float = Field(
        default=10.0,
        ge=0,
        description="How long 'no signature verifies' is reused for a digest, so that an image signed "
        "a moment ago is admitted soon after.",
    )
    cache_max_entries: int = Field(
        default=4096, gt=0, description="Bound on each cache (tags, signatures), least recently used out."
    )
    max_manifest_bytes: int = Field(
        default=4 * 1024 * 1024, gt=0, description="Largest manifest or index labgate reads."
    )
    max_signature_bytes: int = Field(
        default=1024 * 1024, gt=0, description="Largest signature payload or Sigstore bundle labgate reads."
    )
    max_signatures: int = Field(
        default=16, gt=0, description="At most this many signature manifests are read per image."
    )

    @field_validator("insecure_registries")
    @classmethod
    def _normalize_insecure(cls, value: list[str]) -> list[str]:
        return [normalize_registry(v) for v in value]

    @field_validator("registry_timeouts")
    @classmethod
    def _normalize_timeouts(cls, value: dict[str, float]) -> dict[str, float]:
        for registry, seconds in value.items():
            if not 0 < seconds <= 2.5:
                raise ValueError(f"timeout for {registry} must be in (0, 2.5] seconds")
        return {normalize_registry(k): v for k, v in value.items()}

    def timeout_for(self, registry: str) -> float:
        """The budget for one image on `registry`."""
        return self.registry_timeouts.get(registry, self.registry_timeout_seconds)

    def is_insecure(self, registry: str) -> bool:
        """Whether `registry` is spoken to over plain HTTP."""
        return registry in self.insecure_registries


@lru_cache(maxsize=1)
def get_provenance_settings() -> ProvenanceSettings:
    """The process-wide provenance settings, read once from the environment."""
    return ProvenanceSettings()
