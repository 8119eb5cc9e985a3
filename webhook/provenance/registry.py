"""The one door to OCI registries (the distribution API): manifests, blobs and referrers, over httpx.

What it does for its callers:

- Authentication as Docker does it: a request answered 401 with `WWW-Authenticate: Bearer realm=...,
  service=...,scope=...` fetches a token from the realm (with Basic credentials from a pull secret when
  there are some) and retries; `WWW-Authenticate: Basic` retries with the credentials. Tokens are reused
  until they expire. With several matching credentials each is tried in turn, as the kubelet does.
- Integrity: a manifest's digest is the sha256 of the exact bytes the registry returned (for a multi-arch
  index, the index's own digest), never a header's word; blobs and manifests fetched by digest must hash
  to that digest.
- Referrers (OCI 1.1): `GET /v2/<name>/referrers/<digest>`, and the `sha256-<hex>` tag schema when the
  registry has no referrers API.
- Transport: HTTPS with the public roots plus an optional CA bundle; plain HTTP only for registries the
  settings list as insecure. Every failure becomes a RegistryError whose `reason` is short and names the
  registry, e.g. "registry 127.0.0.1:5000 did not answer within 1.0s".

One room each: `RegistryTransport` (transport), `RegistryAuth` (authentication), `RegistryClient`
(the API and integrity checks, what callers use).
"""

from __future__ import annotations

import base64
import ipaddress
import json
import re
import ssl
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import certifi
import httpx
from pydantic import ValidationError

from labgate.core.errors import LabgateError
from webhook.provenance.credentials import RegistryCredential
from webhook.provenance.oci import (
    INDEX_MEDIA_TYPES,
    MANIFEST_MEDIA_TYPES,
    OCI_INDEX,
    Descriptor,
    digest_of,
    referrers_tag,
)
from webhook.provenance.reference import DOCKER_HUB, validate_digest
from webhook.provenance.settings import ProvenanceSettings

_DOCKER_HUB_API = "registry-1.docker.io"
# Status codes with which a registry says it has no referrers API (the spec says 404; some say more).
_NO_REFERRERS_API = frozenset({400, 404, 405, 406, 501})
# How long a registry that answered "no referrers API" is not asked again (it may be upgraded).
_NO_REFERRERS_API_SECONDS = 600.0
_ERROR_BODY_LIMIT = 64 * 1024
_TOKEN_BODY_LIMIT = 256 * 1024
# Registries must grant a token for at least 60 s (distribution token spec); reuse it a little less long.
_TOKEN_DEFAULT_SECONDS = 60
_TOKEN_MARGIN_SECONDS = 5


class RegistryError(LabgateError):
    """A registry could not answer; `reason` is short, names the registry and is fit for a denial."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class RegistryUnavailableError(RegistryError):
    """The registry did not answer in time, could not be reached, or failed (5xx)."""


class RegistryAuthError(RegistryError):
    """The registry wants credentials that the pod does not have, or refused the ones it has."""


class NotFoundError(RegistryError):
    """The registry answered that the manifest or blob does not exist."""


@dataclass(frozen=True)
class Repository:
    """A repository on a registry: `docker.io` + `library/nginx`."""

    registry: str
    name: str

    def __str__(self) -> str:
        return f"{self.registry}/{self.name}"


@dataclass(frozen=True)
class Manifest:
    """A manifest or index exactly as the registry served it, with the digest of those bytes."""

    digest: str
    media_type: str
    content: bytes

    def document(self) -> dict[str, Any]:
        """The manifest as JSON."""
        parsed = json.loads(self.content)
        if not isinstance(parsed, dict):
            raise ValueError("a manifest is a JSON object")
        return parsed

    @property
    def is_index(self) -> bool:
        """A multi-platform index (OCI image index or Docker manifest list)."""
        return self.media_type in INDEX_MEDIA_TYPES


@dataclass(frozen=True)
class Challenge:
    """A parsed `WWW-Authenticate` header: scheme (lowercase) and its parameters."""

    scheme: str
    params: dict[str, str]


_CHALLENGE_SCHEME = re.compile(r"\s*([A-Za-z][A-Za-z0-9._~+/-]*)\s*")
_CHALLENGE_PARAM = re.compile(r'\s*([A-Za-z0-9_-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))\s*,?')


def parse_challenge(header: str) -> Challenge | None:
    """`Bearer realm="https://auth.example/token",service="registry.example"` -> Challenge, or None."""
    scheme = _CHALLENGE_SCHEME.match(header)
    if scheme is None:
        return None
    params: dict[str, str] = {}
    position = scheme.end()
    while position < len(header):
        param = _CHALLENGE_PARAM.match(header, position)
        if param is None or param.end() == position:
            break
        quoted, bare = param.group(2), param.group(3)
        params[param.group(1).lower()] = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
        position = param.end()
    return Challenge(scheme=scheme.group(1).lower(), params=params)


@dataclass(frozen=True)
class _Reply:
    status: int
    headers: httpx.Headers
    body: bytes
    url: str


@dataclass
class _Token:
    header: str
    expires_at: float


def realm_problem(realm: str, *, registry_host: str, is_insecure: bool) -> str | None:
    """Why labgate will not ask `realm` for a token, or None. As go-containerregistry (crane, cosign)
    does: https only (http for an insecure registry), and no IP literal in a private, loopback or
    link-local range unless it is the registry's own host:port, so that a registry cannot point the
    webhook, with the pod's credentials, at the cloud metadata service or other internal endpoints."""
    parts = urlsplit(realm)
    if parts.scheme not in ("https", "http") or not parts.netloc:
        return f"{realm!r} is not an http(s) URL"
    if parts.scheme == "http" and not is_insecure:
        return f"{realm!r} is not https"
    if parts.netloc == registry_host:
        return None
    try:
        address = ipaddress.ip_address(parts.hostname or "")
    except ValueError:
        return None  # a name; DNS-based tricks are for network policy to stop
    if address.is_private or address.is_loopback or address.is_link_local or address.is_unspecified:
        return f"{realm!r} is a private or link-local address"
    return None


def _error_code(body: bytes) -> str:
    """The first distribution error code of a response body ("MANIFEST_UNKNOWN"), or ""."""
    try:
        errors = json.loads(body).get("errors") or []
        return str(errors[0].get("code") or "") if errors else ""
    except (ValueError, AttributeError, IndexError, TypeError):
        return ""


def _tls_context(settings: ProvenanceSettings) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=certifi.where())
    if settings.ca_bundle is not None:
        context.load_verify_locations(cafile=str(settings.ca_bundle))
    return context


class RegistryTransport:
    """One GET at a time to any registry, bounded in time and size: the pooled connections, TLS, the
    base URL of each registry, and transport failures as RegistryErrors."""

    def __init__(self, settings: ProvenanceSettings, *, transport: httpx.AsyncBaseTransport | None = None):
        self.settings = settings
        self._http = httpx.AsyncClient(
            verify=_tls_context(settings),
            transport=transport,
            follow_redirects=True,  # httpx drops Authorization when a redirect leaves the origin
            headers={"User-Agent": "labgate-provenance"},
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
        )
        self.requests = 0  # for benchmarks and tests: round trips made

    async def aclose(self) -> None:
        await self._http.aclose()

    def base_url(self, registry: str) -> str:
        """`https://registry.example:5000`, plain http for insecure registries, Docker Hub's API host."""
        host = _DOCKER_HUB_API if registry == DOCKER_HUB else registry
        scheme = "http" if self.settings.is_insecure(registry) else "https"
        return f"{scheme}://{host}"

    async def get(self, registry: str, url: str, headers: dict[str, str], *, limit: int) -> _Reply:
        """One HTTP GET, the body read up to `limit` bytes; transport failures become RegistryErrors."""
        timeout = self.settings.timeout_for(registry)
        self.requests += 1
        try:
            async with self._http.stream("GET", url, headers=headers, timeout=timeout) as response:
                ok = 200 <= response.status_code < 300
                cap = limit if ok else min(limit, _ERROR_BODY_LIMIT)
                length = response.headers.get("content-length")
                if ok and length is not None and length.isdigit() and int(length) > cap:
                    raise RegistryError(
                        f"registry {registry} offered {length} bytes at {httpx.URL(url).path}; "
                        f"labgate reads at most {cap}"
                    )
                chunks = []
                size = 0
                async for chunk in response.aiter_bytes():
                    size += len(chunk)
                    if size > cap:
                        if not ok:
                            break
                        raise RegistryError(
                            f"registry {registry} sent more than {cap} bytes at {httpx.URL(url).path}"
                        )
                    chunks.append(chunk)
                return _Reply(response.status_code, response.headers, b"".join(chunks), str(response.url))
        except httpx.TimeoutException as err:
            raise RegistryUnavailableError(f"registry {registry} did not answer within {timeout}s") from err
        except httpx.ConnectError as err:
            raise RegistryUnavailableError(f"registry {registry} is unreachable ({_short(err)})") from err
        except httpx.TransportError as err:
            raise RegistryUnavailableError(f"registry {registry} failed: {_short(err)}") from err


class RegistryAuth:
    """Authentication as Docker does it: each credential in turn, a 401's challenge answered (a
    bearer token from the realm, or Basic), tokens reused until they expire."""

    def __init__(self, transport: RegistryTransport, *, clock: Callable[[], float]):
        self._transport = transport
        self._clock = clock
        self._tokens: dict[tuple[str, str, str], _Token] = {}

    async def get(
        self,
        repository: Repository,
        path: str,
        credentials: Sequence[RegistryCredential],
        *,
        accept: str,
        limit: int,
        what: str,
    ) -> _Reply:
        """GET with authentication: each credential in turn (anonymous when there are none)."""
        attempts: Sequence[RegistryCredential | None] = list(credentials) or [None]
        reply: _Reply | None = None
        refusal: RegistryAuthError | None = None
        for credential in attempts:
            try:
                reply = await self._get_as(
                    repository, path, credential, accept=accept, limit=limit, what=what
                )
            except RegistryAuthError as err:  # this credential was refused; the next may do
                refusal = err
                continue
            if reply.status != 401:
                return reply
        if credentials:
            raise refusal or RegistryAuthError(
                f"registry {repository.registry} refused the pull secret's credentials for {repository.name}"
            )
        if reply is None:
            raise refusal or RegistryAuthError(f"registry {repository.registry} refused {what}")
        challenge = parse_challenge(reply.headers.get("www-authenticate", ""))
        if challenge is not None and challenge.scheme in ("basic", "bearer"):
            # Anonymous token requests work for public images; reaching here means the image is private.
            raise RegistryAuthError(
                f"registry {repository.registry} requires credentials for {repository.name} and the pod "
                "has no image pull secret for it"
            )
        raise RegistryAuthError(f"registry {repository.registry} answered 401 to {what}")

    async def _get_as(
        self,
        repository: Repository,
        path: str,
        credential: RegistryCredential | None,
        *,
        accept: str,
        limit: int,
        what: str,
    ) -> _Reply:
        key = (repository.registry, repository.name, credential.fingerprint if credential else "")
        token = self._tokens.get(key)
        if token is not None and token.expires_at <= self._clock():
            del self._tokens[key]
            token = None
        url = self._transport.base_url(repository.registry) + path
        headers = {"Accept": accept}
        if token is not None:
            headers["Authorization"] = token.header
        reply = await self._transport.get(repository.registry, url, headers, limit=limit)
        if reply.status != 401:
            return reply
        challenge = parse_challenge(reply.headers.get("www-authenticate", ""))
        if challenge is None:
            return reply
        authorization = await self._authorize(repository, challenge, credential)
        if authorization is None:
            return reply
        self._tokens[key] = authorization
        headers["Authorization"] = authorization.header
        return await self._transport.get(repository.registry, url, headers, limit=limit)

    async def _authorize(
        self, repository: Repository, challenge: Challenge, credential: RegistryCredential | None
    ) -> _Token | None:
        """The Authorization header the challenge asks for, or None when it cannot be met."""
        now = self._clock()
        if challenge.scheme == "basic":
            return None if credential is None else _Token(_basic(credential), now + 3600)
        if challenge.scheme != "bearer":
            return None
        realm = challenge.params.get("realm", "")
        problem = realm_problem(
            realm,
            registry_host=urlsplit(self._transport.base_url(repository.registry)).netloc,
            is_insecure=self._transport.settings.is_insecure(repository.registry),
        )
        if problem is not None:
            raise RegistryAuthError(
                f"registry {repository.registry} sent an unacceptable token realm: {problem}"
            )
        params = {"scope": f"repository:{repository.name}:pull"}
        if service := challenge.params.get("service"):
            params["service"] = service
        headers = {"Accept": "application/json"}
        if credential is not None:
            headers["Authorization"] = _basic(credential)
        url = str(httpx.URL(realm).copy_merge_params(params))
        reply = await self._transport.get(repository.registry, url, headers, limit=_TOKEN_BODY_LIMIT)
        if reply.status in (401, 403):
            if credential is None:
                return None
            raise RegistryAuthError(
                f"the token service of registry {repository.registry} refused the pull secret's "
                f"credentials for {repository.name}"
            )
        if reply.status != 200:
            raise RegistryUnavailableError(
                f"the token service of registry {repository.registry} answered HTTP {reply.status}"
            )
        try:
            answer = json.loads(reply.body)
            token = str(answer.get("token") or answer.get("access_token") or "")
            lifetime = max(int(answer.get("expires_in") or _TOKEN_DEFAULT_SECONDS), _TOKEN_DEFAULT_SECONDS)
        except (ValueError, AttributeError, TypeError) as err:
            raise RegistryError(
                f"the token service of registry {repository.registry} answered with no token"
            ) from err
        if not token:
            raise RegistryError(f"the token service of registry {repository.registry} answered with no token")
        return _Token(f"Bearer {token}", now + lifetime - _TOKEN_MARGIN_SECONDS)


class RegistryClient:
    """Reads manifests, blobs and referrers from any registry, checking what it reads; one instance
    per process (it pools connections and caches tokens). Call `aclose()` when done."""

    def __init__(
        self,
        settings: ProvenanceSettings,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.settings = settings
        self._clock = clock
        self._without_referrers_api: dict[str, float] = {}  # registry -> until when
        self._transport = RegistryTransport(settings, transport=transport)
        self._auth = RegistryAuth(self._transport, clock=self._now)

    def _now(self) -> float:
        return self._clock()  # read at each call: a test may put another clock in

    @property
    def requests(self) -> int:
        """Round trips made (for benchmarks and tests)."""
        return self._transport.requests

    async def aclose(self) -> None:
        await self._transport.aclose()

    def base_url(self, registry: str) -> str:
        """`https://registry.example:5000`, plain http for insecure registries, Docker Hub's API host."""
        return self._transport.base_url(registry)

    async def manifest(
        self,
        repository: Repository,
        reference: str,
        credentials: Sequence[RegistryCredential] = (),
    ) -> Manifest:
        """The manifest or index that `reference` (a tag or a digest) names; NotFoundError if none."""
        found = await self.manifest_if_exists(repository, reference, credentials)
        if found is None:
            raise NotFoundError(
                f"registry {repository.registry} has no manifest {repository.name}:{reference}"
            )
        return found

    async def manifest_if_exists(
        self,
        repository: Repository,
        reference: str,
        credentials: Sequence[RegistryCredential] = (),
    ) -> Manifest | None:
        """Like `manifest`, but None when the registry says the manifest does not exist."""
        is_digest = ":" in reference
        if is_digest:
            validate_digest(reference)
        reply = await self._auth.get(
            repository,
            f"/v2/{repository.name}/manifests/{reference}",
            credentials,
            accept=", ".join(MANIFEST_MEDIA_TYPES),
            limit=self.settings.max_manifest_bytes,
            what=f"manifest {reference}",
        )
        if reply.status == 404:
            return None
        self._raise_for_status(repository, reply, what=f"manifest {repository.name}:{reference}")
        algorithm = reference.partition(":")[0] if is_digest else "sha256"
        digest = digest_of(reply.body, algorithm)
        if is_digest and digest != reference:
            raise RegistryError(
                f"registry {repository.registry} served {repository.name}@{reference} with content "
                f"whose digest is {digest}"
            )
        announced = reply.headers.get("docker-content-digest")
        if announced and announced.startswith(f"{algorithm}:") and announced != digest:
            raise RegistryError(
                f"registry {repository.registry} announced digest {announced} for {repository.name}:"
                f"{reference} but served content whose digest is {digest}"
            )
        media_type = reply.headers.get("content-type", "").split(";")[0].strip()
        if media_type not in MANIFEST_MEDIA_TYPES:
            try:
                media_type = str(json.loads(reply.body).get("mediaType") or "")
            except (ValueError, AttributeError):
                media_type = ""
        if media_type not in MANIFEST_MEDIA_TYPES:
            raise RegistryError(
                f"registry {repository.registry} served {repository.name}:{reference} as "
                f"{media_type or 'an unknown media type'}, not an OCI or Docker v2 manifest"
            )
        return Manifest(digest=digest, media_type=media_type, content=reply.body)

    async def blob(
        self,
        repository: Repository,
        digest: str,
        credentials: Sequence[RegistryCredential] = (),
        *,
        max_bytes: int,
    ) -> bytes:
        """The blob `digest`, checked against its digest; NotFoundError if the registry has none."""
        validate_digest(digest)
        reply = await self._auth.get(
            repository,
            f"/v2/{repository.name}/blobs/{digest}",
            credentials,
            accept="*/*",
            limit=max_bytes,
            what=f"blob {digest}",
        )
        if reply.status == 404:
            raise NotFoundError(f"registry {repository.registry} has no blob {repository.name}@{digest}")
        self._raise_for_status(repository, reply, what=f"blob {repository.name}@{digest}")
        if digest_of(reply.body, digest.partition(":")[0]) != digest:
            raise RegistryError(
                f"registry {repository.registry} served blob {repository.name}@{digest} with other content"
            )
        return reply.body

    async def referrers(
        self,
        repository: Repository,
        digest: str,
        credentials: Sequence[RegistryCredential] = (),
        *,
        artifact_type: Callable[[str | None], bool] | None = None,
    ) -> list[Descriptor]:
        """Manifests whose `subject` is `digest` (OCI 1.1 referrers), optionally only those whose
        artifactType passes `artifact_type`. Uses the referrers API, or the `sha256-<hex>` tag schema
        when the registry has none; [] when there are no referrers."""
        validate_digest(digest)
        has_api = self._without_referrers_api.get(repository.registry, 0.0) <= self._clock()
        reply = None
        if has_api:
            reply = await self._auth.get(
                repository,
                f"/v2/{repository.name}/referrers/{digest}",
                credentials,
                accept=OCI_INDEX,
                limit=self.settings.max_manifest_bytes,
                what=f"referrers of {digest}",
            )
        if reply is not None and reply.status == 200:
            content = reply.body
        elif reply is None or reply.status in _NO_REFERRERS_API:
            if reply is not None:
                self._without_referrers_api[repository.registry] = self._clock() + _NO_REFERRERS_API_SECONDS
            fallback = await self.manifest_if_exists(repository, referrers_tag(digest), credentials)
            if fallback is None or not fallback.is_index:
                return []
            content = fallback.content
        else:
            self._raise_for_status(repository, reply, what=f"referrers of {repository.name}@{digest}")
            return []  # pragma: no cover - _raise_for_status raised
        try:
            entries = json.loads(content).get("manifests") or []
            descriptors = [Descriptor.model_validate(e) for e in entries]
        except (ValueError, AttributeError, ValidationError) as err:
            raise RegistryError(
                f"registry {repository.registry} answered the referrers of {repository.name}@{digest} "
                f"with an invalid index ({type(err).__name__})"
            ) from err
        if artifact_type is not None:
            descriptors = [d for d in descriptors if artifact_type(d.artifact_type)]
        return descriptors

    def _raise_for_status(self, repository: Repository, reply: _Reply, *, what: str) -> None:
        registry = repository.registry
        if 200 <= reply.status < 300:
            return
        code = _error_code(reply.body)
        detail = f" ({code})" if code else ""
        if reply.status in (401, 403):
            raise RegistryAuthError(
                f"registry {registry} refused access to {what}{detail}: the pod's image pull secrets "
                "give no credentials it accepts"
            )
        if reply.status == 404:
            raise NotFoundError(f"registry {registry} has no {what}{detail}")
        if reply.status == 429:
            raise RegistryUnavailableError(f"registry {registry} is rate-limiting labgate (429)")
        if reply.status >= 500:
            raise RegistryUnavailableError(f"registry {registry} failed with HTTP {reply.status}")
        raise RegistryError(f"registry {registry} answered HTTP {reply.status} for {what}{detail}")


def _basic(credential: RegistryCredential) -> str:
    """The Authorization header value for Basic authentication with `credential`."""
    pair = f"{credential.username}:{credential.password.get_secret_value()}".encode()
    return f"Basic {base64.b64encode(pair).decode()}"


def _short(err: Exception) -> str:
    """A one-line, bounded description of a transport error."""
    text = " ".join(str(err).split()) or type(err).__name__
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "its TLS certificate is not trusted: " + text.split("certificate verify failed:")[-1].strip(
            " ()"
        )
    return text[:160]
