"""Image references, parsed and normalised exactly as Docker (github.com/distribution/reference v0.6,
`ParseDockerRef`) does, plus the few normalisations a policy needs on top of it.

Pure: no I/O. `nginx`, `docker.io/library/nginx:latest` and `index.docker.io/library/nginx` are one
image, `docker.io/library/nginx:latest`. On top of Docker's rules:

- the registry host is lowercased (DNS names are case-insensitive; Docker keeps the case as written);
- `registry-1.docker.io` (Docker Hub's real API host) is also `docker.io`, like `index.docker.io`;
- only the digest algorithms go-digest registers are accepted (sha256, sha384, sha512), in lowercase hex,
  which is what a registry or a kubelet would accept anyway.

A reference that has both a tag and a digest keeps both (the digest decides what runs; the tag is shown).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from labgate.core.errors import LabgateError

DOCKER_HUB = "docker.io"
# Names of Docker Hub that Docker itself, or its registry API, uses.
_DOCKER_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
_OFFICIAL_PREFIX = "library/"
DEFAULT_TAG = "latest"
MAX_REPOSITORY_LENGTH = 255

# The grammar of github.com/distribution/reference (regexp.go), piece by piece.
_ALPHANUMERIC = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALPHANUMERIC}(?:{_SEPARATOR}{_ALPHANUMERIC})*"
_REMOTE_NAME = rf"{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN_AND_PORT = rf"(?:{_DOMAIN_NAME}|{_IPV6})(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][0-9a-fA-F]{32,}"

_REFERENCE = re.compile(
    rf"(?P<name>(?:{_DOMAIN_AND_PORT}/)?{_REMOTE_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
_NAME = re.compile(rf"(?:(?P<domain>{_DOMAIN_AND_PORT})/)?(?P<path>{_REMOTE_NAME})", re.ASCII)
_IDENTIFIER = re.compile(r"[a-f0-9]{64}", re.ASCII)
_REMOTE_NAME_ONLY = re.compile(_REMOTE_NAME, re.ASCII)
_DOMAIN_ONLY = re.compile(_DOMAIN_AND_PORT, re.ASCII)

# go-digest's registered algorithms and the length of their hex encoding.
DIGEST_HEX_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}


class InvalidReferenceError(LabgateError, ValueError):
    """The string is not an image reference a container runtime would accept; the message says why."""


@dataclass(frozen=True)
class ImageReference:
    """One image reference, normalised: `registry/repository[:tag][@digest]`.

    `tag` is `latest` when neither a tag nor a digest was written, and None when only a digest was.
    """

    original: str
    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def name(self) -> str:
        """`registry/repository`, e.g. `docker.io/library/nginx`."""
        return f"{self.registry}/{self.repository}"

    @property
    def normalized(self) -> str:
        """The canonical form: `docker.io/library/nginx:latest`, `ghcr.io/x/y:v1@sha256:...`."""
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{self.name}{tag}{digest}"

    @property
    def is_pinned(self) -> bool:
        """Whether the reference names its content by digest (a tag beside it is then ignored)."""
        return self.digest is not None

    def pinned(self, digest: str) -> str:
        """The reference to run `digest` of this repository: `registry/repository@digest`."""
        validate_digest(digest)
        return f"{self.name}@{digest}"


def validate_digest(digest: str) -> str:
    """`digest` if it is `<algorithm>:<lowercase hex>` of a registered algorithm, else InvalidReferenceError."""
    algorithm, sep, hex_part = digest.partition(":")
    expected = DIGEST_HEX_LENGTHS.get(algorithm)
    if not sep or expected is None:
        raise InvalidReferenceError(
            f"unsupported digest algorithm {algorithm!r} in {digest!r} (use sha256, sha384 or sha512)"
        )
    if len(hex_part) != expected or not re.fullmatch(r"[a-f0-9]+", hex_part):
        raise InvalidReferenceError(
            f"invalid digest {digest!r}: {algorithm} needs {expected} lowercase hex characters"
        )
    return digest


def normalize_registry(host: str) -> str:
    """The registry host as labgate compares it: lowercase, with Docker Hub's aliases folded to docker.io."""
    lowered = host.lower()
    return DOCKER_HUB if lowered in _DOCKER_HUB_ALIASES else lowered


def _split_docker_domain(name: str) -> tuple[str, str]:
    """distribution/reference splitDockerDomain: which part of `name` (tag and digest included) is the
    registry. The first path component is one only if it looks like a host: it contains "." or ":",
    is `localhost`, or has uppercase letters (which repository paths may not)."""
    maybe_domain, slash, maybe_remote = name.partition("/")
    if not slash:
        return DOCKER_HUB, _OFFICIAL_PREFIX + name
    if maybe_domain == "localhost":
        domain, remote = maybe_domain, maybe_remote
    elif maybe_domain == "index.docker.io":
        domain, remote = DOCKER_HUB, maybe_remote
    elif any(c in maybe_domain for c in ".:") or maybe_domain.lower() != maybe_domain:
        domain, remote = maybe_domain, maybe_remote
    else:
        domain, remote = DOCKER_HUB, name
    if normalize_registry(domain) == DOCKER_HUB and "/" not in remote:
        remote = _OFFICIAL_PREFIX + remote
    return domain, remote


def parse_reference(text: str) -> ImageReference:
    """Parse and normalise an image reference as written in a pod spec.

    Raises InvalidReferenceError, whose message says what is wrong, for anything Docker would refuse.
    """
    if not text:
        raise InvalidReferenceError("empty image reference")
    if text != text.strip():
        raise InvalidReferenceError(f"image reference {text!r} has leading or trailing whitespace")
    if _IDENTIFIER.fullmatch(text):
        raise InvalidReferenceError(
            f"invalid repository name {text!r}: a 64-character hexadecimal string is an image id, not a name"
        )
    domain, remainder = _split_docker_domain(text)
    remote = remainder.split(":", 1)[0]
    if remote.lower() != remote:
        raise InvalidReferenceError(f"invalid image reference {text!r}: repository name must be lowercase")
    match = _REFERENCE.fullmatch(f"{domain}/{remainder}")
    if match is None:
        raise InvalidReferenceError(f"invalid image reference format: {text!r}")
    name = _NAME.fullmatch(match["name"])
    if name is None or name["domain"] is None:  # pragma: no cover - the domain was prefixed above
        raise InvalidReferenceError(f"invalid image reference format: {text!r}")
    path = name["path"]
    if len(path) > MAX_REPOSITORY_LENGTH:
        raise InvalidReferenceError(
            f"invalid image reference {text!r}: repository name is longer than {MAX_REPOSITORY_LENGTH} "
            "characters"
        )
    registry = normalize_registry(name["domain"])
    if registry == DOCKER_HUB and "/" not in path:
        # "registry-1.docker.io/nginx" is the official image too.
        path = _OFFICIAL_PREFIX + path
    digest = match["digest"]
    if digest is not None:
        validate_digest(digest)
    tag = match["tag"] if match["tag"] is not None or digest is not None else DEFAULT_TAG
    return ImageReference(original=text, registry=registry, repository=path, tag=tag, digest=digest)


@dataclass(frozen=True)
class RepositoryPrefix:
    """An allowed registry, or registry and repository prefix: `registry.lab.example`,
    `registry.lab.example/vision`, `docker.io/library`.

    The first component is always the registry host (lowercased, Docker Hub aliases folded); the rest is
    a repository path prefix matched on `/` boundaries, so `registry.lab.example/vision` allows
    `registry.lab.example/vision/train` but not `registry.lab.example/visionary`. No `library/` is added:
    `docker.io/nginx` is the `nginx` namespace on Docker Hub, not the official image.
    """

    registry: str
    path: str

    def allows(self, reference: ImageReference) -> bool:
        """Whether `reference` lives under this prefix."""
        if reference.registry != self.registry:
            return False
        return (
            not self.path
            or reference.repository == self.path
            or (reference.repository.startswith(self.path + "/"))
        )


def parse_prefix(text: str) -> RepositoryPrefix:
    """Parse an allowed-registry entry; InvalidReferenceError for anything that is not `host[/path]`."""
    host, _, path = text.strip().rstrip("/").partition("/")
    if not _DOMAIN_ONLY.fullmatch(host):
        raise InvalidReferenceError(f"invalid registry {host!r} in allowed registry entry {text!r}")
    if path and not _REMOTE_NAME_ONLY.fullmatch(path):
        raise InvalidReferenceError(
            f"invalid repository prefix {path!r} in allowed registry entry {text!r} "
            "(lowercase path components, no tag or digest)"
        )
    return RepositoryPrefix(registry=normalize_registry(host), path=path)


def is_allowed(reference: ImageReference, prefixes: list[RepositoryPrefix]) -> bool:
    """Whether any of `prefixes` allows `reference`."""
    return any(prefix.allows(reference) for prefix in prefixes)


_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def spec_images(spec: Any) -> list[str]:
    """Every image a pod spec runs, as written, in order, once each: its containers' (init and
    ephemeral too) and its image volumes' (`spec.volumes[].image.reference`, Kubernetes 1.31+)."""
    if not isinstance(spec, dict):
        return []
    images: dict[str, None] = {}
    for field in _CONTAINER_LISTS:
        containers = spec.get(field)
        # Not a list: the apiserver would refuse the object; decide it rather than fail on it.
        for container in containers if isinstance(containers, list) else []:
            if isinstance(container, dict) and isinstance(container.get("image"), str):
                images[container["image"]] = None
    volumes = spec.get("volumes")
    for volume in volumes if isinstance(volumes, list) else []:
        source = volume.get("image") if isinstance(volume, dict) else None
        if isinstance(source, dict) and isinstance(source.get("reference"), str):
            images[source["reference"]] = None
    return list(images)
