"""Registry credentials from a pod's image pull secrets, matched to an image as the kubelet matches them.

Pure: the caller hands in the Secret objects (the pod's `imagePullSecrets` and its service account's);
this module decodes `.dockerconfigjson` / `.dockercfg` and picks the entries that apply to one image,
following kubelet's keyring (pkg/credentialprovider): keys may carry a scheme, a port, a path prefix and
`*` wildcards per host label; `/v1/` and `/v2/` paths mean the whole host; the most specific keys come
first; `index.docker.io` entries serve Docker Hub images. Unlike the kubelet, Docker Hub's aliases are
folded (an `https://index.docker.io/v1/` key serves `docker.io/...` images directly).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, SecretStr

from webhook.provenance.reference import ImageReference, normalize_registry

log = logging.getLogger(__name__)

DOCKER_CONFIG_JSON_TYPE = "kubernetes.io/dockerconfigjson"
DOCKER_CFG_TYPE = "kubernetes.io/dockercfg"


class RegistryCredential(BaseModel):
    """A user name and password (or token) for one registry, as a docker config entry holds them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    username: str
    password: SecretStr
    source: str = ""  # e.g. "secret team-a/pull" (for logs; never the password)

    @property
    def fingerprint(self) -> str:
        """A stable identity for caches that never reveals the password."""
        raw = f"{self.username}\0{self.password.get_secret_value()}".encode()
        return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class _Entry:
    host_labels: tuple[str, ...]
    port: str
    path: str
    key: str
    credential: RegistryCredential


_HOST_PORT = re.compile(r"(?P<host>\[[^\]]*\]|[^:]*)(?::(?P<port>[0-9]*))?")


def _host_port(netloc: str) -> tuple[str, str]:
    """("registry.example", "5000") from "registry.example:5000"; IPv6 hosts keep their brackets."""
    match = _HOST_PORT.fullmatch(netloc)
    if match is None:
        return netloc, ""
    return match["host"], match["port"] or ""


def _label_matches(pattern: str, label: str) -> bool:
    """One host label against a key's label, where `*` stands for any characters (kubelet's glob; the
    other glob characters are taken literally, so an IPv6 host in brackets matches itself)."""
    if "*" not in pattern:
        return pattern == label
    return re.fullmatch(re.escape(pattern).replace(r"\*", "[^.]*"), label) is not None


def _split_key(key: str) -> tuple[tuple[str, ...], str, str]:
    """(host labels, port, path) of a docker config key such as `https://registry.example:5000/v1/`."""
    value = key if key.startswith(("https://", "http://")) else f"https://{key}"
    parts = urlsplit(value)
    host, port = _host_port(parts.netloc)
    path = parts.path
    if path.startswith(("/v1/", "/v2/")):
        path = path[3:]
    path = "" if path == "/" else path
    return tuple(normalize_registry(host).split(".")), port, path


def _credential(entry: Mapping[str, Any], source: str) -> RegistryCredential | None:
    username = str(entry.get("username") or "")
    password = str(entry.get("password") or "")
    if auth := entry.get("auth"):
        try:
            decoded = base64.b64decode(str(auth), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            log.warning("%s: an auth entry is not base64 of user:password; ignored", source)
            return None
        username, sep, password = decoded.partition(":")
        if not sep:
            log.warning("%s: an auth entry has no ':' between user and password; ignored", source)
            return None
    if not username and not password:
        return None
    return RegistryCredential(username=username, password=SecretStr(password), source=source)


@dataclass(frozen=True)
class PullCredentials:
    """Every docker config entry of a pod's pull secrets, most specific key first."""

    entries: tuple[_Entry, ...] = field(default=())

    def for_image(self, reference: ImageReference) -> list[RegistryCredential]:
        """The credentials the kubelet would try for `reference`, in its order (none: pull anonymously)."""
        target_host, target_port = _host_port(reference.registry)
        target_labels = tuple(target_host.split("."))
        target_path = "/" + reference.repository
        found = []
        for entry in self.entries:
            if entry.port != target_port or len(entry.host_labels) != len(target_labels):
                continue
            if not target_path.startswith(entry.path):
                continue
            if all(_label_matches(g, t) for g, t in zip(entry.host_labels, target_labels, strict=True)):
                found.append(entry.credential)
        return found

    def __bool__(self) -> bool:
        return bool(self.entries)


def from_docker_config(auths: Mapping[str, Any], *, source: str = "") -> PullCredentials:
    """PullCredentials from an `auths` map: `{"registry.example": {"auth": base64("user:pass")}}`."""
    entries = []
    for key, value in auths.items():
        if not isinstance(value, Mapping):
            continue
        credential = _credential(value, source)
        if credential is None:
            continue
        labels, port, path = _split_key(str(key))
        entries.append(_Entry(labels, port, path, str(key), credential))
    return PullCredentials(_sorted(entries))


def _sorted(entries: Iterable[_Entry]) -> tuple[_Entry, ...]:
    # kubelet reverse-sorts its keys so that "quay.io/coreos" is tried before "quay.io".
    return tuple(sorted(entries, key=lambda e: (".".join(e.host_labels), e.port, e.path), reverse=True))


def _decode_secret(secret: Mapping[str, Any]) -> Mapping[str, Any] | None:
    metadata = secret.get("metadata") or {}
    source = f"secret {metadata.get('namespace', '')}/{metadata.get('name', '')}"
    data = secret.get("data") or {}
    kind = secret.get("type")
    raw_key = {DOCKER_CONFIG_JSON_TYPE: ".dockerconfigjson", DOCKER_CFG_TYPE: ".dockercfg"}.get(str(kind))
    if raw_key is None or raw_key not in data:
        return None
    try:
        document = json.loads(base64.b64decode(str(data[raw_key]), validate=True))
    except (binascii.Error, ValueError):
        log.warning("%s: %s is not base64-encoded JSON; ignored", source, raw_key)
        return None
    if not isinstance(document, dict):
        return None
    auths = document.get("auths") if raw_key == ".dockerconfigjson" else document
    return auths if isinstance(auths, dict) else None


def pull_credentials(secrets: Iterable[Mapping[str, Any]]) -> PullCredentials:
    """PullCredentials from Kubernetes Secret objects (as the API serves them, `data` base64-encoded) of
    type kubernetes.io/dockerconfigjson or kubernetes.io/dockercfg; other Secrets are ignored."""
    entries: list[_Entry] = []
    for secret in secrets:
        auths = _decode_secret(secret)
        if auths is None:
            continue
        metadata = secret.get("metadata") or {}
        source = f"secret {metadata.get('namespace', '')}/{metadata.get('name', '')}"
        entries.extend(from_docker_config(auths, source=source).entries)
    return PullCredentials(_sorted(entries))
