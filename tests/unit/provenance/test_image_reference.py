"""Image references are normalised exactly as Docker does (distribution/reference ParseDockerRef), and
allowed-registry prefixes match on host and path boundaries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.provenance.reference import (
    InvalidReferenceError,
    RepositoryPrefix,
    is_allowed,
    parse_prefix,
    parse_reference,
)

D = "sha256:" + "a" * 64
D2 = "sha256:" + "0123456789abcdef" * 4

# written -> (registry, repository, tag, digest, normalized)
VALID = [
    ("nginx", ("docker.io", "library/nginx", "latest", None, "docker.io/library/nginx:latest")),
    ("nginx:1.25", ("docker.io", "library/nginx", "1.25", None, "docker.io/library/nginx:1.25")),
    ("docker.io/library/nginx:latest", ("docker.io", "library/nginx", "latest", None, None)),
    ("index.docker.io/library/nginx", ("docker.io", "library/nginx", "latest", None, None)),
    ("registry-1.docker.io/library/nginx", ("docker.io", "library/nginx", "latest", None, None)),
    ("docker.io/nginx", ("docker.io", "library/nginx", "latest", None, None)),
    ("index.docker.io/nginx", ("docker.io", "library/nginx", "latest", None, None)),
    ("registry-1.docker.io/nginx:1", ("docker.io", "library/nginx", "1", None, None)),
    ("Docker.IO/nginx", ("docker.io", "library/nginx", "latest", None, None)),
    ("bitnami/redis:7", ("docker.io", "bitnami/redis", "7", None, "docker.io/bitnami/redis:7")),
    ("library/nginx", ("docker.io", "library/nginx", "latest", None, None)),
    ("docker.io/docker.io/ubuntu", ("docker.io", "docker.io/ubuntu", "latest", None, None)),
    ("localhost/foo", ("localhost", "foo", "latest", None, "localhost/foo:latest")),
    ("localhost:5000/foo/bar:v1", ("localhost:5000", "foo/bar", "v1", None, None)),
    # A bare host is a Docker Hub name (Docker's own FIXME), and "host:5000" a name with tag "5000".
    ("localhost", ("docker.io", "library/localhost", "latest", None, None)),
    ("example.com", ("docker.io", "library/example.com", "latest", None, None)),
    ("example.com:5000", ("docker.io", "library/example.com", "5000", None, None)),
    ("Registry.Lab.Example/vision/train:v1", ("registry.lab.example", "vision/train", "v1", None, None)),
    ("REGISTRY/foo", ("registry", "foo", "latest", None, "registry/foo:latest")),
    ("registry:5000/foo", ("registry:5000", "foo", "latest", None, None)),
    ("127.0.0.1:5000/a/b@" + D, ("127.0.0.1:5000", "a/b", None, D, f"127.0.0.1:5000/a/b@{D}")),
    ("ghcr.io/org/app:v2@" + D2, ("ghcr.io", "org/app", "v2", D2, f"ghcr.io/org/app:v2@{D2}")),
    ("nginx@" + D, ("docker.io", "library/nginx", None, D, f"docker.io/library/nginx@{D}")),
    ("docker.io/library/nginx:latest@" + D, ("docker.io", "library/nginx", "latest", D, None)),
    ("[::1]:5000/foo", ("[::1]:5000", "foo", "latest", None, "[::1]:5000/foo:latest")),
    ("[2001:DB8::1]/foo", ("[2001:db8::1]", "foo", "latest", None, None)),
    ("ghcr.io/a/b/c/d:Tag_with.dots-1", ("ghcr.io", "a/b/c/d", "Tag_with.dots-1", None, None)),
    ("quay.io/a__b/c-d---e.f_g:x", ("quay.io", "a__b/c-d---e.f_g", "x", None, None)),
    ("r.example/x:" + "t" * 128, ("r.example", "x", "t" * 128, None, None)),
    ("nginx@sha512:" + "b" * 128, ("docker.io", "library/nginx", None, "sha512:" + "b" * 128, None)),
    ("my-registry.local:443/team/x", ("my-registry.local:443", "team/x", "latest", None, None)),
    ("r.example/" + "a" * 255, ("r.example", "a" * 255, "latest", None, None)),
]


@pytest.mark.parametrize(("written", "expected"), VALID, ids=[v[0][:60] for v in VALID])
def test_valid_references_normalise_like_docker(
    written: str, expected: tuple[str, str, str | None, str | None, str | None]
) -> None:
    registry, repository, tag, digest, normalized = expected
    ref = parse_reference(written)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, digest)
    assert ref.original == written
    if normalized is not None:
        assert ref.normalized == normalized
    assert ref.is_pinned == (digest is not None)


def test_the_familiar_forms_of_one_image_are_one_image() -> None:
    forms = [
        "nginx",
        "nginx:latest",
        "docker.io/nginx",
        "docker.io/library/nginx",
        "docker.io/library/nginx:latest",
        "index.docker.io/library/nginx",
        "registry-1.docker.io/library/nginx:latest",
        "DOCKER.IO/library/nginx",
    ]
    assert {parse_reference(f).normalized for f in forms} == {"docker.io/library/nginx:latest"}


# written -> a fragment of the error message
INVALID = [
    ("", "empty image reference"),
    (" nginx", "whitespace"),
    ("nginx:latest ", "whitespace"),
    ("Nginx", "must be lowercase"),
    ("foo/Bar", "must be lowercase"),
    ("localhost:5000/Foo:v1", "must be lowercase"),
    ("a" * 64, "64-character hexadecimal"),
    ("nginx:", "invalid image reference format"),
    (":latest", "invalid image reference format"),
    ("@" + D, "invalid image reference format"),
    ("nginx@sha256:abc", "invalid image reference format"),
    ("nginx@sha256:" + "A" * 64, "lowercase hex"),
    ("nginx@sha256:" + "a" * 63, "needs 64 lowercase hex"),
    ("nginx@sha256:" + "a" * 65, "needs 64 lowercase hex"),
    ("nginx@md5:" + "a" * 32, "unsupported digest algorithm"),
    ("nginx@" + "a" * 64, "invalid image reference format"),
    ("foo//bar", "invalid image reference format"),
    ("foo/", "invalid image reference format"),
    ("/foo", "invalid image reference format"),
    ("-foo", "invalid image reference format"),
    ("foo-/bar", "invalid image reference format"),
    ("foo_/bar", "invalid image reference format"),
    ("foo..bar", "invalid image reference format"),
    ("foo:bar:baz", "invalid image reference format"),
    ("r.example/x:" + "t" * 129, "invalid image reference format"),
    ("r.example/x:.tag", "invalid image reference format"),
    ("registry.example:port/foo", "invalid image reference format"),
    ("http://registry.example/foo", "invalid image reference format"),
    ("exa_mple.com/foo", "invalid image reference format"),
    ("r.example/" + "a" * 256, "longer than 255"),
    ("nginx:tag@", "invalid image reference format"),
    ("ngi nx", "invalid image reference format"),
    ("nginx\n", "whitespace"),
    ("registry.example/fóo", "invalid image reference format"),
]


@pytest.mark.parametrize(("written", "reason"), INVALID, ids=[repr(v[0])[:60] for v in INVALID])
def test_invalid_references_are_refused_with_a_reason(written: str, reason: str) -> None:
    with pytest.raises(InvalidReferenceError, match=None) as caught:
        parse_reference(written)
    assert reason in str(caught.value)


def test_pinned_names_the_repository_by_digest() -> None:
    ref = parse_reference("nginx:1.25")
    assert ref.pinned(D) == f"docker.io/library/nginx@{D}"
    with pytest.raises(InvalidReferenceError):
        ref.pinned("sha256:nothex")


# (entry, image, allowed)
PREFIXES = [
    ("registry.lab.example", "registry.lab.example/x:v1", True),
    ("registry.lab.example", "registry.lab.example.evil.com/x:v1", False),
    ("registry.lab.example", "evil.com/registry.lab.example/x", False),
    ("registry.lab.example", "registry.lab.example:5000/x", False),
    ("registry.lab.example:5000", "registry.lab.example:5000/x", True),
    ("registry.lab.example/vision", "registry.lab.example/vision/x", True),
    ("registry.lab.example/vision", "registry.lab.example/vision/a/b:v1", True),
    ("registry.lab.example/vision", "registry.lab.example/vision", True),
    ("registry.lab.example/vision", "registry.lab.example/visionary", False),
    ("registry.lab.example/vision", "registry.lab.example/visionary/x", False),
    ("registry.lab.example/vision", "registry.lab.example/other/vision/x", False),
    ("registry.lab.example/vision/", "registry.lab.example/vision/x", True),
    ("Registry.LAB.example/vision", "registry.lab.example/vision/x", True),
    ("registry.lab.example/vision", "REGISTRY.lab.example/vision/x", True),
    ("docker.io", "nginx", True),
    ("docker.io", "someone/tool", True),
    ("index.docker.io/library", "nginx", True),
    ("registry-1.docker.io/library", "docker.io/library/busybox", True),
    ("docker.io/library", "someone/tool", False),
    ("docker.io/nginx", "nginx", False),  # the `nginx` namespace, not the official image
    ("docker.io/nginx", "nginx/nginx-ingress", True),
    ("localhost:5000", "localhost:5000/a", True),
    ("localhost", "localhost:5000/a", False),
    ("[::1]:5000", "[::1]:5000/a", True),
]


@pytest.mark.parametrize(("entry", "image", "allowed"), PREFIXES, ids=[f"{p[0]}|{p[1]}" for p in PREFIXES])
def test_prefixes_match_on_host_and_path_boundaries(entry: str, image: str, allowed: bool) -> None:
    assert parse_prefix(entry).allows(parse_reference(image)) is allowed


@pytest.mark.parametrize(
    "entry",
    ["", "/vision", "http://registry.example", "registry.example/Vision", "registry.example/x:v1", "a b"],
)
def test_invalid_prefixes_are_refused(entry: str) -> None:
    with pytest.raises(InvalidReferenceError):
        parse_prefix(entry)


def test_is_allowed_takes_any_prefix() -> None:
    prefixes = [parse_prefix("ghcr.io/lab"), parse_prefix("registry.lab.example/vision")]
    assert is_allowed(parse_reference("ghcr.io/lab/tool:v1"), prefixes)
    assert not is_allowed(parse_reference("ghcr.io/labs/tool:v1"), prefixes)
    assert not is_allowed(parse_reference("nginx"), [])


# --- properties ---

_alnum = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=8)
_separator = st.sampled_from([".", "_", "__", "-", "--"])
_path_component = st.builds(
    lambda first, rest: first + "".join(s + a for s, a in rest),
    _alnum,
    st.lists(st.tuples(_separator, _alnum), max_size=2),
)
_path = st.lists(_path_component, min_size=2, max_size=4).map("/".join)
_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?", fullmatch=True)
_host = st.builds(
    lambda labels, tld, port: ".".join([*labels, tld]) + (f":{port}" if port else ""),
    st.lists(_label, min_size=1, max_size=3),
    st.sampled_from(["example", "com", "io", "internal"]),
    st.one_of(st.none(), st.integers(min_value=1, max_value=65535)),
).filter(lambda h: h.split(":")[0] not in {"docker.io", "index.docker.io", "registry-1.docker.io"})
_tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
_digest = st.from_regex(r"[a-f0-9]{64}", fullmatch=True).map(lambda h: f"sha256:{h}")


@given(host=_host, path=_path, tag=st.one_of(st.none(), _tag), digest=st.one_of(st.none(), _digest))
def test_components_survive_parsing(host: str, path: str, tag: str | None, digest: str | None) -> None:
    written = host + "/" + path + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")
    ref = parse_reference(written)
    assert ref.registry == host
    assert ref.repository == path
    assert ref.digest == digest
    assert ref.tag == (tag if tag else (None if digest else "latest"))


@given(host=st.one_of(_host, st.just("docker.io")), path=_path, tag=st.one_of(st.none(), _tag))
def test_normalising_is_idempotent(host: str, path: str, tag: str | None) -> None:
    first = parse_reference(host + "/" + path + (f":{tag}" if tag else ""))
    again = parse_reference(first.normalized)
    assert again.normalized == first.normalized
    assert (again.registry, again.repository, again.tag) == (first.registry, first.repository, first.tag)


@given(host=_host, path=_path, suffix=_alnum)
def test_a_prefix_never_allows_a_longer_sibling(host: str, path: str, suffix: str) -> None:
    prefix = RepositoryPrefix(registry=host, path=path)
    assert prefix.allows(parse_reference(f"{host}/{path}/{suffix}"))
    assert not prefix.allows(parse_reference(f"{host}/{path}{suffix}"))
    name, colon, port = host.partition(":")
    lookalike = f"{name}.{suffix}{colon}{port}"
    assert not parse_prefix(host).allows(parse_reference(f"{lookalike}/{path}"))
