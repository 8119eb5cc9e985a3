"""Image facts against the real thing: the CNCF distribution registry on loopback, images pushed with
crane, signatures made by cosign v2 (`.sig` tag) and v3 (Sigstore bundle), Basic (htpasswd) and Bearer
(token service) authentication, TLS with a private CA, and registries that are down or hung."""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from devcluster.processes import free_port
from devcluster.registry import ImageTools, LocalRegistry, TokenServer
from labgate.core.certificates import issue_serving_cert, make_ca
from tests.manual_clock import ManualClock
from webhook.provenance.credentials import PullCredentials, pull_credentials
from webhook.provenance.facts import ImageFact, ImageFacts, SigningKey
from webhook.provenance.oci import OCI_INDEX, referrers_tag
from webhook.provenance.registry import RegistryClient, Repository
from webhook.provenance.settings import ProvenanceSettings

pytestmark = pytest.mark.provenance


def settings_for(*registries: LocalRegistry, **overrides: Any) -> ProvenanceSettings:
    insecure = [r.host for r in registries if r.tls is None]
    return ProvenanceSettings(insecure_registries=insecure, **overrides)


def gather(
    settings: ProvenanceSettings,
    references: list[str],
    *,
    credentials: PullCredentials | None = None,
    keys: list[SigningKey] | None = None,
) -> dict[str, ImageFact]:
    """Facts from a fresh (cold) gatherer."""

    async def run() -> dict[str, ImageFact]:
        client = RegistryClient(settings)
        try:
            return await ImageFacts(client, settings).gather(
                references, credentials=credentials, signing_keys=keys or []
            )
        finally:
            await client.aclose()

    return asyncio.run(run())


def pull_secret(host: str, username: str, password: str) -> dict[str, Any]:
    """A kubernetes.io/dockerconfigjson Secret as the API serves it."""
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    config = json.dumps({"auths": {host: {"auth": auth}}}).encode()
    return {
        "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": "pull", "namespace": "team-a"},
        "data": {".dockerconfigjson": base64.b64encode(config).decode()},
    }


# --- fixtures: one plain registry, tools and keys for the module ---


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("provenance")


@pytest.fixture(scope="module")
def tools(workdir: Path) -> ImageTools:
    return ImageTools(workdir / "tools")


@pytest.fixture(scope="module")
def registry(workdir: Path) -> Iterator[LocalRegistry]:
    with LocalRegistry(workdir, name="plain") as started:
        yield started


@pytest.fixture(scope="module")
def release_key(tools: ImageTools) -> tuple[Path, SigningKey]:
    private, public = tools.generate_key_pair("release")
    return private, SigningKey(name="release", public_key=public)


@pytest.fixture(scope="module")
def other_key(tools: ImageTools) -> tuple[Path, SigningKey]:
    private, public = tools.generate_key_pair("other", version="v3")
    return private, SigningKey(name="other", public_key=public)


# --- digests ---


def test_a_tag_resolves_to_its_manifest_digest(registry: LocalRegistry, tools: ImageTools) -> None:
    reference = f"{registry.host}/lab/trainer:v1"
    digest = tools.push_random_image(reference)
    facts = gather(settings_for(registry), [reference])
    assert facts[reference].model_dump() == {
        "reference": reference,
        "normalized": f"{registry.host}/lab/trainer:v1",
        "registry": registry.host,
        "repository": "lab/trainer",
        "tag": "v1",
        "digest": digest,
        "signed_by": [],
        "error": None,
    }


def test_a_multi_arch_index_resolves_to_the_index_digest(registry: LocalRegistry, tools: ImageTools) -> None:
    amd64 = tools.push_random_image(f"{registry.host}/lab/multi:amd64", platform="linux/amd64")
    arm64 = tools.push_random_image(f"{registry.host}/lab/multi:arm64", platform="linux/arm64")
    reference = f"{registry.host}/lab/multi:v1"
    index = tools.push_index(
        reference, [f"{registry.host}/lab/multi@{amd64}", f"{registry.host}/lab/multi@{arm64}"]
    )
    assert index not in (amd64, arm64)
    facts = gather(settings_for(registry), [reference])
    assert facts[reference].digest == index
    assert facts[reference].error is None

    async def media_type() -> str:
        client = RegistryClient(settings_for(registry))
        try:
            manifest = await client.manifest(Repository(registry.host, "lab/multi"), "v1")
        finally:
            await client.aclose()
        return manifest.media_type

    assert asyncio.run(media_type()) == OCI_INDEX


def test_a_missing_tag_is_an_error_that_names_it(registry: LocalRegistry) -> None:
    reference = f"{registry.host}/lab/absent:v9"
    fact = gather(settings_for(registry), [reference])[reference]
    assert fact.digest is None
    assert fact.error == f"registry {registry.host} has no manifest lab/absent:v9"


def test_a_pinned_image_without_keys_costs_no_round_trip(registry: LocalRegistry) -> None:
    reference = f"{registry.host}/lab/anything@sha256:" + "c" * 64
    settings = settings_for(registry)

    async def run() -> tuple[ImageFact, int]:
        client = RegistryClient(settings)
        try:
            facts = await ImageFacts(client, settings).gather([reference])
        finally:
            await client.aclose()
        return facts[reference], client.requests

    fact, requests = asyncio.run(run())
    assert (fact.digest, fact.tag, fact.error, requests) == ("sha256:" + "c" * 64, None, None, 0)


# --- signatures ---


def test_cosign_v2_sig_tag_verifies_with_the_right_key_only(
    registry: LocalRegistry,
    tools: ImageTools,
    release_key: tuple[Path, SigningKey],
    other_key: tuple[Path, SigningKey],
) -> None:
    reference = f"{registry.host}/lab/signed-v2:v1"
    digest = tools.push_random_image(reference)
    tools.sign("v2", release_key[0], f"{registry.host}/lab/signed-v2@{digest}")
    tags = tools.crane("ls", f"{registry.host}/lab/signed-v2").split()
    assert f"{digest.replace(':', '-')}.sig" in tags

    settings = settings_for(registry)
    both = gather(settings, [reference], keys=[release_key[1], other_key[1]])[reference]
    assert (both.digest, both.signed_by, both.error) == (digest, ["release"], None)
    assert gather(settings, [reference], keys=[other_key[1]])[reference].signed_by == []


def test_cosign_v3_bundle_verifies_with_the_right_key_only(
    registry: LocalRegistry,
    tools: ImageTools,
    release_key: tuple[Path, SigningKey],
    other_key: tuple[Path, SigningKey],
) -> None:
    reference = f"{registry.host}/lab/signed-v3:v1"
    digest = tools.push_random_image(reference)
    tools.sign("v3", other_key[0], f"{registry.host}/lab/signed-v3@{digest}")
    # The distribution registry has no referrers API: cosign v3 used the sha256-<hex> tag schema.
    tags = tools.crane("ls", f"{registry.host}/lab/signed-v3").split()
    assert referrers_tag(digest) in tags
    assert f"{digest.replace(':', '-')}.sig" not in tags

    settings = settings_for(registry)
    fact = gather(settings, [reference], keys=[release_key[1], other_key[1]])[reference]
    assert (fact.digest, fact.signed_by, fact.error) == (digest, ["other"], None)
    assert gather(settings, [reference], keys=[release_key[1]])[reference].signed_by == []


def test_signatures_of_both_formats_on_one_image_are_all_reported(
    registry: LocalRegistry,
    tools: ImageTools,
    release_key: tuple[Path, SigningKey],
    other_key: tuple[Path, SigningKey],
) -> None:
    reference = f"{registry.host}/lab/signed-both:v1"
    digest = tools.push_random_image(reference)
    tools.sign("v2", release_key[0], f"{registry.host}/lab/signed-both@{digest}")
    tools.sign("v3", other_key[0], f"{registry.host}/lab/signed-both@{digest}")
    fact = gather(settings_for(registry), [reference], keys=[other_key[1], release_key[1]])[reference]
    assert fact.signed_by == ["other", "release"]


def _private_pem(kind: str) -> bytes:
    keys: dict[str, Any] = {
        "rsa": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
        "ed25519": ed25519.Ed25519PrivateKey.generate,
        "p384": lambda: ec.generate_private_key(ec.SECP384R1()),
    }
    key = keys[kind]()
    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


@pytest.mark.parametrize("kind", ["rsa", "ed25519", "p384"])
@pytest.mark.parametrize("version", ["v2", "v3"])
def test_rsa_ed25519_and_p384_keys_verify(
    registry: LocalRegistry, tools: ImageTools, kind: str, version: str
) -> None:
    private, public = tools.import_key_pair(f"{kind}-{version}", _private_pem(kind), version=version)
    reference = f"{registry.host}/keys/{kind}-{version}:v1"
    digest = tools.push_random_image(reference)
    tools.sign(version, private, f"{registry.host}/keys/{kind}-{version}@{digest}")
    key = SigningKey(name=kind, public_key=public)
    assert gather(settings_for(registry), [reference], keys=[key])[reference].signed_by == [kind]


def test_a_tag_moved_after_signing_names_a_new_unsigned_digest(
    registry: LocalRegistry, tools: ImageTools, release_key: tuple[Path, SigningKey]
) -> None:
    reference = f"{registry.host}/lab/moving:stable"
    signed = tools.push_random_image(reference)
    tools.sign("v2", release_key[0], f"{registry.host}/lab/moving@{signed}")
    settings = settings_for(registry, tag_ttl_seconds=30)
    clock = ManualClock(1000.0)

    async def run() -> list[ImageFact]:
        client = RegistryClient(settings, clock=clock)
        facts = ImageFacts(client, settings, clock=clock)
        seen = []
        try:
            seen.append((await facts.gather([reference], signing_keys=[release_key[1]]))[reference])
            moved = tools.push_random_image(reference)  # someone pushes over the signed tag
            assert moved != signed
            clock.now += 10  # within the tag TTL the pinned digest stays what was resolved
            seen.append((await facts.gather([reference], signing_keys=[release_key[1]]))[reference])
            clock.now += 30
            seen.append((await facts.gather([reference], signing_keys=[release_key[1]]))[reference])
        finally:
            await client.aclose()
        return seen

    before, cached, after = asyncio.run(run())
    assert (before.digest, before.signed_by) == (signed, ["release"])
    assert (cached.digest, cached.signed_by) == (signed, ["release"])
    assert after.digest != signed
    assert (after.signed_by, after.error) == ([], None)


def test_an_image_signed_after_a_first_look_is_seen_once_unsigned_ttl_passes(
    registry: LocalRegistry, tools: ImageTools, release_key: tuple[Path, SigningKey]
) -> None:
    reference = f"{registry.host}/lab/late:v1"
    digest = tools.push_random_image(reference)
    settings = settings_for(registry, unsigned_ttl_seconds=10)
    clock = ManualClock(1000.0)

    async def run() -> list[list[str]]:
        client = RegistryClient(settings, clock=clock)
        facts = ImageFacts(client, settings, clock=clock)
        try:
            first = (await facts.gather([reference], signing_keys=[release_key[1]]))[reference]
            tools.sign("v2", release_key[0], f"{registry.host}/lab/late@{digest}")
            soon = (await facts.gather([reference], signing_keys=[release_key[1]]))[reference]
            clock.now += 11
            later = (await facts.gather([reference], signing_keys=[release_key[1]]))[reference]
        finally:
            await client.aclose()
        return [first.signed_by, soon.signed_by, later.signed_by]

    assert asyncio.run(run()) == [[], [], ["release"]]


def test_cached_facts_need_no_round_trip_and_are_fast(
    registry: LocalRegistry, tools: ImageTools, release_key: tuple[Path, SigningKey]
) -> None:
    reference = f"{registry.host}/lab/hot:v1"
    digest = tools.push_random_image(reference)
    tools.sign("v2", release_key[0], f"{registry.host}/lab/hot@{digest}")
    tools.sign("v3", release_key[0], f"{registry.host}/lab/hot@{digest}")
    settings = settings_for(registry)

    async def run() -> tuple[float, float, int, int, list[str]]:
        client = RegistryClient(settings)
        facts = ImageFacts(client, settings)
        try:
            start = time.perf_counter()
            cold = await facts.gather([reference], signing_keys=[release_key[1]])
            cold_seconds = time.perf_counter() - start
            cold_requests = client.requests
            start = time.perf_counter()
            warm = await facts.gather([reference], signing_keys=[release_key[1]])
            warm_seconds = time.perf_counter() - start
        finally:
            await client.aclose()
        assert cold == warm
        return (
            cold_seconds,
            warm_seconds,
            cold_requests,
            client.requests - cold_requests,
            warm[reference].signed_by,
        )

    cold_seconds, warm_seconds, cold_requests, warm_requests, signed_by = asyncio.run(run())
    assert signed_by == ["release"]
    assert cold_requests >= 4  # tag, .sig manifest + payload, referrers (+ fallback tag, bundle)
    assert warm_requests == 0
    assert cold_seconds < 1.0
    assert warm_seconds < 0.05
    print(
        f"cold {cold_seconds * 1000:.1f} ms ({cold_requests} requests), cached {warm_seconds * 1000:.2f} ms"
    )


def test_concurrent_admissions_share_one_set_of_round_trips(
    registry: LocalRegistry, tools: ImageTools, release_key: tuple[Path, SigningKey]
) -> None:
    reference = f"{registry.host}/lab/fanout:v1"
    digest = tools.push_random_image(reference)
    tools.sign("v2", release_key[0], f"{registry.host}/lab/fanout@{digest}")
    settings = settings_for(registry)

    async def requests_for(admissions: int) -> int:
        client = RegistryClient(settings)
        facts = ImageFacts(client, settings)
        try:
            results = await asyncio.gather(
                *(facts.gather([reference], signing_keys=[release_key[1]]) for _ in range(admissions))
            )
        finally:
            await client.aclose()
        assert all(r[reference].signed_by == ["release"] for r in results)
        return client.requests

    async def run() -> tuple[int, int]:
        return await requests_for(1), await requests_for(20)

    alone, twenty = asyncio.run(run())
    assert twenty == alone


# --- registries that fail ---


def test_a_stopped_registry_is_a_clear_error_at_once(workdir: Path, tools: ImageTools) -> None:
    registry = LocalRegistry(workdir, name="stopped")
    with registry:
        reference = f"{registry.host}/lab/gone:v1"
        tools.push_random_image(reference)
    start = time.monotonic()
    fact = gather(settings_for(registry), [reference])[reference]
    assert time.monotonic() - start < 1.0
    assert fact.error is not None
    assert fact.error.startswith(f"registry {registry.host} is unreachable (")
    assert fact.digest is None


def test_a_hung_registry_is_a_clear_error_within_its_timeout() -> None:
    # A socket that listens but never answers: connections complete in the backlog, requests hang.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        host = f"127.0.0.1:{listener.getsockname()[1]}"
        reference = f"{host}/lab/hung:v1"
        settings = ProvenanceSettings(insecure_registries=[host], registry_timeouts={host: 0.5})
        start = time.monotonic()
        fact = gather(settings, [reference], keys=[])[reference]
        elapsed = time.monotonic() - start
    assert fact.error == f"registry {host} did not answer within 0.5s"
    assert 0.45 < elapsed < 1.5


def test_one_slow_registry_does_not_hold_back_another(registry: LocalRegistry, tools: ImageTools) -> None:
    good = f"{registry.host}/lab/quick:v1"
    digest = tools.push_random_image(good)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        hung = f"127.0.0.1:{listener.getsockname()[1]}"
        settings = ProvenanceSettings(
            insecure_registries=[registry.host, hung], registry_timeouts={hung: 0.3}
        )
        facts = gather(settings, [good, f"{hung}/x:v1"])
    assert facts[good].digest == digest
    assert facts[f"{hung}/x:v1"].error == f"registry {hung} did not answer within 0.3s"


# --- credentials ---


@pytest.fixture(scope="module")
def private_registry(workdir: Path, tools: ImageTools) -> Iterator[LocalRegistry]:
    with LocalRegistry(workdir, name="htpasswd", htpasswd_users={"robot": "s3cret"}) as started:
        tools.login(started.host, "robot", "s3cret")
        yield started


def test_basic_auth_registry_needs_and_uses_the_pull_secret(
    private_registry: LocalRegistry, tools: ImageTools, release_key: tuple[Path, SigningKey]
) -> None:
    host = private_registry.host
    reference = f"{host}/team/private:v1"
    digest = tools.push_random_image(reference)
    tools.sign("v2", release_key[0], f"{host}/team/private@{digest}")
    tools.sign("v3", release_key[0], f"{host}/team/private@{digest}")
    settings = settings_for(private_registry)

    anonymous = gather(settings, [reference])[reference]
    assert anonymous.error == (
        f"registry {host} requires credentials for team/private and the pod has no image pull secret for it"
    )
    good = pull_credentials([pull_secret(host, "robot", "s3cret")])
    fact = gather(settings, [reference], credentials=good, keys=[release_key[1]])[reference]
    assert (fact.digest, fact.signed_by, fact.error) == (digest, ["release"], None)

    wrong = pull_credentials([pull_secret(host, "robot", "guess")])
    refused = gather(settings, [reference], credentials=wrong)[reference]
    assert refused.error == f"registry {host} refused the pull secret's credentials for team/private"


def test_what_one_pull_secret_revealed_is_not_reused_without_it(
    private_registry: LocalRegistry, tools: ImageTools
) -> None:
    host = private_registry.host
    reference = f"{host}/team/cached:v1"
    digest = tools.push_random_image(reference)
    settings = settings_for(private_registry)
    credentials = pull_credentials([pull_secret(host, "robot", "s3cret")])

    async def run() -> tuple[ImageFact, ImageFact]:
        client = RegistryClient(settings)
        facts = ImageFacts(client, settings)
        try:
            with_secret = (await facts.gather([reference], credentials=credentials))[reference]
            without = (await facts.gather([reference]))[reference]
        finally:
            await client.aclose()
        return with_secret, without

    with_secret, without = asyncio.run(run())
    assert with_secret.digest == digest
    assert (without.digest, without.error) == (
        None,
        f"registry {host} requires credentials for team/cached and the pod has no image pull secret for it",
    )


def test_of_several_pull_secrets_the_one_that_works_is_used(
    private_registry: LocalRegistry, tools: ImageTools
) -> None:
    host = private_registry.host
    reference = f"{host}/team/several:v1"
    digest = tools.push_random_image(reference)
    secrets = [pull_secret(host, "robot", "old-password"), pull_secret(host, "robot", "s3cret")]
    fact = gather(settings_for(private_registry), [reference], credentials=pull_credentials(secrets))[
        reference
    ]
    assert (fact.digest, fact.error) == (digest, None)


@pytest.fixture(scope="module")
def token_registry(workdir: Path, tools: ImageTools) -> Iterator[tuple[LocalRegistry, TokenServer]]:
    token_server = TokenServer({"robot": "t0ken-pass"}, service="labgate-test-registry")
    token_server.start()
    try:
        with LocalRegistry(workdir, name="bearer", token_server=token_server) as started:
            tools.login(started.host, "robot", "t0ken-pass")
            yield started, token_server
    finally:
        token_server.stop()


def test_bearer_token_registry_uses_the_token_flow_with_the_pull_secret(
    token_registry: tuple[LocalRegistry, TokenServer],
    tools: ImageTools,
    release_key: tuple[Path, SigningKey],
) -> None:
    registry, token_server = token_registry
    host = registry.host
    reference = f"{host}/vision/model:v3"
    digest = tools.push_random_image(reference)
    tools.sign("v2", release_key[0], f"{host}/vision/model@{digest}")
    tools.sign("v3", release_key[0], f"{host}/vision/model@{digest}")
    settings = settings_for(registry)

    anonymous = gather(settings, [reference])[reference]
    assert anonymous.error == (
        f"registry {host} requires credentials for vision/model and the pod has no image pull secret for it"
    )
    credentials = pull_credentials([pull_secret(host, "robot", "t0ken-pass")])
    issued_before = token_server.issued
    fact = gather(settings, [reference], credentials=credentials, keys=[release_key[1]])[reference]
    assert (fact.digest, fact.signed_by, fact.error) == (digest, ["release"], None)
    # One token for the repository, reused for the manifest, signatures and blobs.
    assert token_server.issued - issued_before == 1

    wrong = pull_credentials([pull_secret(host, "robot", "nope")])
    refused = gather(settings, [reference], credentials=wrong)[reference]
    assert refused.error == (
        f"the token service of registry {host} refused the pull secret's credentials for vision/model"
    )


# --- TLS ---


def test_tls_registry_is_trusted_through_the_ca_bundle(workdir: Path) -> None:
    ca = make_ca("labgate test registry CA")
    ca_file = workdir / "registry-ca.pem"
    ca_file.write_bytes(ca.cert_pem)
    serving = issue_serving_cert(ca, common_name="127.0.0.1", ip_addresses=("127.0.0.1",))
    tls_tools = ImageTools(workdir / "tls-tools", insecure=False, ca_file=ca_file)
    registry = LocalRegistry(workdir, name="tls", tls=serving, ca_file=ca_file, port=free_port())
    with registry:
        reference = f"{registry.host}/secure/app:v1"
        digest = tls_tools.push_random_image(reference)
        trusted = gather(ProvenanceSettings(ca_bundle=ca_file), [reference])[reference]
        untrusted = gather(ProvenanceSettings(), [reference])[reference]
    assert (trusted.digest, trusted.error) == (digest, None)
    assert untrusted.error is not None
    assert untrusted.error.startswith(
        f"registry {registry.host} is unreachable (its TLS certificate is not trusted"
    )
