"""The registry door's protocol details that the local registry cannot show (the referrers API, token
expiry, lying or hostile registries), pull-secret matching as the kubelet does it (the cache: tests/unit/admission/test_expiring_cache.py)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tests.manual_clock import ManualClock
from webhook.provenance import cosign
from webhook.provenance.credentials import PullCredentials, from_docker_config, pull_credentials
from webhook.provenance.facts import ImageFacts, SigningKey, images_input
from webhook.provenance.oci import DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST, digest_of
from webhook.provenance.reference import parse_reference
from webhook.provenance.registry import (
    NotFoundError,
    RegistryClient,
    RegistryError,
    RegistryUnavailableError,
    Repository,
    parse_challenge,
    realm_problem,
)
from webhook.provenance.settings import ProvenanceSettings

Handler = Callable[[httpx.Request], httpx.Response]


def run_with(handler: Handler, work: Callable[[RegistryClient], Any], **settings: Any) -> Any:
    async def main() -> Any:
        client = RegistryClient(ProvenanceSettings(**settings), transport=httpx.MockTransport(handler))
        try:
            return await work(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


REPO = Repository("registry.lab.example", "vision/train")
MANIFEST = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": []}).encode()
MANIFEST_DIGEST = digest_of(MANIFEST)


# --- challenges and realms ---


@pytest.mark.parametrize(
    ("header", "scheme", "params"),
    [
        (
            'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull"',
            "bearer",
            {
                "realm": "https://auth.docker.io/token",
                "service": "registry.docker.io",
                "scope": "repository:library/nginx:pull",
            },
        ),
        ('Basic realm="Registry Realm"', "basic", {"realm": "Registry Realm"}),
        (
            'bearer realm="https://a/t", error="insufficient_scope"',
            "bearer",
            {"realm": "https://a/t", "error": "insufficient_scope"},
        ),
        ('Bearer realm="https://a/t?x=\\"q\\""', "bearer", {"realm": 'https://a/t?x="q"'}),
        ("Bearer realm=https://a/t,service=s", "bearer", {"realm": "https://a/t", "service": "s"}),
    ],
)
def test_challenges_parse(header: str, scheme: str, params: dict[str, str]) -> None:
    challenge = parse_challenge(header)
    assert challenge is not None
    assert (challenge.scheme, challenge.params) == (scheme, params)


@pytest.mark.parametrize(
    ("realm", "insecure", "problem"),
    [
        ("https://auth.docker.io/token", False, None),
        ("http://auth.example/token", False, "is not https"),
        ("http://auth.example/token", True, None),
        ("https://169.254.169.254/latest/meta-data", False, "private or link-local"),
        ("https://10.0.0.5/token", False, "private or link-local"),
        ("https://[::1]:8443/token", False, "private or link-local"),
        ("https://registry.lab.example/token", False, None),
        ("https://127.0.0.1:5000/token", False, None),  # the registry's own host:port
        ("ftp://auth.example/token", False, "not an http(s) URL"),
        ("", False, "not an http(s) URL"),
    ],
)
def test_token_realms_cannot_point_at_internal_addresses(
    realm: str, insecure: bool, problem: str | None
) -> None:
    found = realm_problem(realm, registry_host="127.0.0.1:5000", is_insecure=insecure)
    assert (found is None) if problem is None else (found is not None and problem in found)


# --- manifests ---


def test_the_digest_is_of_the_bytes_served_not_of_a_header() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            content=MANIFEST,
            headers={"Content-Type": OCI_MANIFEST, "Docker-Content-Digest": "sha256:" + "0" * 64},
        )

    with pytest.raises(
        RegistryError, match=r"announced digest sha256:0000.* but served content whose digest is"
    ):
        run_with(handler, lambda c: c.manifest(REPO, "v1"))


def test_content_fetched_by_digest_must_match_it() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=MANIFEST, headers={"Content-Type": OCI_MANIFEST})

    with pytest.raises(RegistryError, match="with content whose digest is"):
        run_with(handler, lambda c: c.manifest(REPO, "sha256:" + "1" * 64))
    manifest = run_with(handler, lambda c: c.manifest(REPO, MANIFEST_DIGEST))
    assert manifest.digest == MANIFEST_DIGEST


def test_the_media_type_comes_from_the_document_when_the_header_is_generic() -> None:
    content = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST}).encode()

    def handler(request: httpx.Request) -> httpx.Response:
        assert OCI_INDEX in request.headers["Accept"]
        return httpx.Response(200, content=content, headers={"Content-Type": "application/octet-stream"})

    assert run_with(handler, lambda c: c.manifest(REPO, "v1")).media_type == DOCKER_MANIFEST


def test_schema1_and_other_documents_are_refused() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200,
            content=b"{}",
            headers={"Content-Type": "application/vnd.docker.distribution.manifest.v1+prettyjws"},
        )

    with pytest.raises(RegistryError, match="not an OCI or Docker v2 manifest"):
        run_with(handler, lambda c: c.manifest(REPO, "v1"))


def test_oversized_manifests_are_not_read() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"x" * 2048, headers={"Content-Type": OCI_MANIFEST})

    with pytest.raises(RegistryError, match=r"sent more than 1024 bytes|offered 2048 bytes"):
        run_with(handler, lambda c: c.manifest(REPO, "v1"), max_manifest_bytes=1024)


@pytest.mark.parametrize(
    ("status", "error", "message"),
    [
        (404, NotFoundError, "has no manifest vision/train:v1"),
        (429, RegistryUnavailableError, "is rate-limiting labgate (429)"),
        (503, RegistryUnavailableError, "failed with HTTP 503"),
        (400, RegistryError, "answered HTTP 400 for manifest vision/train:v1 (MANIFEST_INVALID)"),
    ],
)
def test_error_statuses_become_short_reasons(status: int, error: type[Exception], message: str) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json={"errors": [{"code": "MANIFEST_INVALID", "message": "x"}]})

    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_with(handler, lambda c: c.manifest(REPO, "v1"))


def test_docker_hub_is_reached_at_its_api_host() -> None:
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, content=MANIFEST, headers={"Content-Type": OCI_MANIFEST})

    run_with(handler, lambda c: c.manifest(Repository("docker.io", "library/nginx"), "latest"))
    assert seen == ["https://registry-1.docker.io/v2/library/nginx/manifests/latest"]


# --- tokens ---


def test_bearer_tokens_are_fetched_once_and_again_when_they_expire() -> None:
    clock = ManualClock(100.0)
    issued: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.host == "auth.lab.example":
            assert request.url.params["scope"] == "repository:vision/train:pull"
            assert request.url.params["service"] == "registry"
            assert request.headers["Authorization"] == "Basic " + base64.b64encode(b"robot:pw").decode()
            issued.append(f"t{len(issued)}")
            return httpx.Response(200, json={"token": issued[-1], "expires_in": 120})
        if request.headers.get("Authorization") == f"Bearer {issued[-1] if issued else ''}":
            return httpx.Response(200, content=MANIFEST, headers={"Content-Type": OCI_MANIFEST})
        return httpx.Response(
            401,
            headers={"WWW-Authenticate": 'Bearer realm="https://auth.lab.example/token",service="registry"'},
        )

    credentials = pull_credentials([_secret("registry.lab.example", "robot", "pw")]).for_image(
        parse_reference("registry.lab.example/vision/train:v1")
    )

    async def work(client: RegistryClient) -> None:
        client._clock = clock
        await client.manifest(REPO, "v1", credentials)
        await client.manifest(REPO, "v1", credentials)
        assert issued == ["t0"]
        clock.now += 200
        await client.manifest(REPO, "v1", credentials)
        assert issued == ["t0", "t1"]

    run_with(handler, work)


# --- referrers ---


def _bundle_for(private: ec.EllipticCurvePrivateKey, digest: str) -> bytes:
    statement = json.dumps(
        {
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"digest": {"sha256": digest.split(":")[1]}}],
            "predicateType": cosign.COSIGN_SIGN_PREDICATE,
            "predicate": {},
        }
    ).encode()
    kind = cosign.IN_TOTO_PAYLOAD_TYPE.encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(statement), statement)
    signature = private.sign(pae, ec.ECDSA(hashes.SHA256()))
    return json.dumps(
        {
            "mediaType": cosign.BUNDLE_MEDIA_TYPE,
            "verificationMaterial": {"publicKey": {"hint": ""}},
            "dsseEnvelope": {
                "payload": base64.b64encode(statement).decode(),
                "payloadType": cosign.IN_TOTO_PAYLOAD_TYPE,
                "signatures": [{"sig": base64.b64encode(signature).decode()}],
            },
        }
    ).encode()


def test_bundles_found_through_the_referrers_api_verify() -> None:
    """A registry with the OCI 1.1 referrers API (the local distribution registry has none)."""
    private = ec.generate_private_key(ec.SECP256R1())
    pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    bundle = _bundle_for(private, MANIFEST_DIGEST)
    bundle_digest = digest_of(bundle)
    referrer = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "artifactType": cosign.BUNDLE_MEDIA_TYPE,
            "config": {
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": digest_of(b"{}"),
                "size": 2,
            },
            "layers": [{"mediaType": cosign.BUNDLE_MEDIA_TYPE, "digest": bundle_digest, "size": len(bundle)}],
            "subject": {"mediaType": OCI_MANIFEST, "digest": MANIFEST_DIGEST, "size": len(MANIFEST)},
        }
    ).encode()
    referrer_digest = digest_of(referrer)
    sbom = {
        "mediaType": OCI_MANIFEST,
        "digest": "sha256:" + "5" * 64,
        "size": 1,
        "artifactType": "application/spdx+json",
    }
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        paths.append(path)
        base = "/v2/vision/train"
        if path == f"{base}/manifests/v1":
            return httpx.Response(200, content=MANIFEST, headers={"Content-Type": OCI_MANIFEST})
        if path == f"{base}/referrers/{MANIFEST_DIGEST}":
            index = {
                "schemaVersion": 2,
                "mediaType": OCI_INDEX,
                "manifests": [
                    sbom,
                    {
                        "mediaType": OCI_MANIFEST,
                        "digest": referrer_digest,
                        "size": len(referrer),
                        "artifactType": cosign.BUNDLE_MEDIA_TYPE,
                    },
                ],
            }
            return httpx.Response(200, json=index, headers={"Content-Type": OCI_INDEX})
        if path == f"{base}/manifests/{referrer_digest}":
            return httpx.Response(200, content=referrer, headers={"Content-Type": OCI_MANIFEST})
        if path == f"{base}/blobs/{bundle_digest}":
            return httpx.Response(200, content=bundle)
        return httpx.Response(404, json={"errors": [{"code": "MANIFEST_UNKNOWN"}]})

    async def main() -> Any:
        settings = ProvenanceSettings()
        client = RegistryClient(settings, transport=httpx.MockTransport(handler))
        try:
            facts = ImageFacts(client, settings)
            return await facts.gather(
                ["registry.lab.example/vision/train:v1"],
                signing_keys=[SigningKey(name="release", public_key=pem.decode())],
            )
        finally:
            await client.aclose()

    fact = asyncio.run(main())["registry.lab.example/vision/train:v1"]
    assert (fact.digest, fact.signed_by, fact.error) == (MANIFEST_DIGEST, ["release"], None)
    assert f"/v2/vision/train/manifests/{MANIFEST_DIGEST.replace(':', '-')}" not in paths  # no fallback tag
    assert "/v2/vision/train/manifests/sha256:" + "5" * 64 not in paths  # the SBOM is not read


def test_a_failure_inside_gathering_is_an_error_fact_not_an_exception() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise RuntimeError("a bug")

    async def main() -> Any:
        settings = ProvenanceSettings()
        client = RegistryClient(settings, transport=httpx.MockTransport(handler))
        try:
            return await ImageFacts(client, settings).gather(["registry.lab.example/x:v1", "Bad/Ref"])
        finally:
            await client.aclose()

    facts = images_input(asyncio.run(main()))
    assert facts["registry.lab.example/x:v1"]["error"] == "labgate could not check the image (RuntimeError)"
    assert facts["Bad/Ref"] == {
        "reference": "Bad/Ref",
        "normalized": None,
        "registry": None,
        "repository": None,
        "tag": None,
        "digest": None,
        "signed_by": [],
        "error": "invalid image reference 'Bad/Ref': repository name must be lowercase",
    }


# --- pull credentials ---


def _secret(
    host: str, user: str, password: str, *, kind: str = "kubernetes.io/dockerconfigjson"
) -> dict[str, Any]:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    entries = {host: {"auth": auth}}
    document = {"auths": entries} if kind == "kubernetes.io/dockerconfigjson" else entries
    key = ".dockerconfigjson" if kind == "kubernetes.io/dockerconfigjson" else ".dockercfg"
    return {
        "type": kind,
        "metadata": {"name": f"pull-{user}", "namespace": "team-a"},
        "data": {key: base64.b64encode(json.dumps(document).encode()).decode()},
    }


@pytest.mark.parametrize(
    ("key", "image", "matches"),
    [
        ("https://index.docker.io/v1/", "nginx", True),
        ("index.docker.io", "someone/tool", True),
        ("docker.io", "docker.io/library/nginx", True),
        ("registry.lab.example", "registry.lab.example/x", True),
        ("https://registry.lab.example/v2/", "registry.lab.example/x", True),
        ("registry.lab.example", "registry.lab.example:5000/x", False),
        ("registry.lab.example:5000", "registry.lab.example:5000/x", True),
        ("*.lab.example", "registry.lab.example/x", True),
        ("*.lab.example", "a.registry.lab.example/x", False),
        ("*.lab.example", "lab.example/x", False),
        ("registry.lab.example/team", "registry.lab.example/team/x", True),
        ("registry.lab.example/team", "registry.lab.example/other/x", False),
        ("REGISTRY.lab.example", "registry.lab.example/x", True),
        ("registry.lab.example", "registry.lab.example.evil.com/x", False),
        ("[::1]:5000", "[::1]:5000/x", True),
    ],
)
def test_pull_secret_entries_match_images_as_the_kubelet_matches_them(
    key: str, image: str, matches: bool
) -> None:
    credentials = from_docker_config({key: {"username": "u", "password": "p"}})
    assert bool(credentials.for_image(parse_reference(image))) is matches


def test_the_most_specific_entry_comes_first_and_dockercfg_works() -> None:
    secrets = [
        _secret("registry.lab.example", "host-wide", "a"),
        _secret("registry.lab.example/team", "team", "b", kind="kubernetes.io/dockercfg"),
    ]
    found = pull_credentials(secrets).for_image(parse_reference("registry.lab.example/team/x:v1"))
    assert [c.username for c in found] == ["team", "host-wide"]
    assert found[0].source == "secret team-a/pull-team"


def test_unusable_secrets_are_ignored() -> None:
    broken = {"type": "kubernetes.io/dockerconfigjson", "metadata": {}, "data": {".dockerconfigjson": "%%%"}}
    opaque = {"type": "Opaque", "data": {"x": "eA=="}}
    no_colon = from_docker_config({"r.example": {"auth": base64.b64encode(b"nocolon").decode()}})
    assert not pull_credentials([broken, opaque])
    assert not no_colon
    assert pull_credentials([]) == PullCredentials()


def test_credential_fingerprints_do_not_reveal_the_password() -> None:
    credential = (
        from_docker_config({"r.example": {"username": "u", "password": "hunter2"}}).entries[0].credential
    )
    assert "hunter2" not in credential.fingerprint
    assert "hunter2" not in repr(credential)
    assert credential.fingerprint == hashlib.sha256(b"u\0hunter2").hexdigest()[:16]
