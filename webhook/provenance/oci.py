"""OCI image-spec vocabulary shared by the registry client and the signature verifiers: media types,
content descriptors, digests. Pure."""

from __future__ import annotations

import hashlib

from pydantic import BaseModel, ConfigDict, Field

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_MEDIA_TYPES = (OCI_INDEX, OCI_MANIFEST, DOCKER_MANIFEST_LIST, DOCKER_MANIFEST)
INDEX_MEDIA_TYPES = (OCI_INDEX, DOCKER_MANIFEST_LIST)


class Descriptor(BaseModel):
    """An OCI content descriptor (a manifest's layer, an index's entry, a referrer)."""

    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)

    media_type: str = Field(default="", alias="mediaType")
    digest: str
    size: int = 0
    artifact_type: str | None = Field(default=None, alias="artifactType")
    annotations: dict[str, str] = Field(default_factory=dict)


def digest_of(content: bytes, algorithm: str = "sha256") -> str:
    """`<algorithm>:<hex>` of `content`."""
    return f"{algorithm}:{hashlib.new(algorithm, content).hexdigest()}"


def referrers_tag(digest: str) -> str:
    """The OCI 1.1 referrers tag schema: `sha256:abc...` -> `sha256-abc...` (hex cut to 64)."""
    algorithm, _, hex_part = digest.partition(":")
    return f"{algorithm}-{hex_part[:64]}"
