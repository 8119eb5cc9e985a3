"""Image provenance through the real kubectl: a real registry, images pushed with crane and signed by
cosign; labgate pins what it checked and refuses what it cannot trust, naming the image and the rule."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devcluster.registry import ImageTools, LocalRegistry
from devcluster.stack import LabgateStack
from tests.e2e.conftest import TenantFactory, TenantUnderTest
from tests.e2e.test_reconciler import get_json

pytestmark = pytest.mark.provenance


@dataclass(frozen=True)
class Lab:
    stack: LabgateStack
    tools: ImageTools
    registry: LocalRegistry
    private: LocalRegistry
    release_key: Path
    other_key: Path
    team: TenantUnderTest


@pytest.fixture(scope="module")
def lab(stack: LabgateStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    workdir = tmp_path_factory.mktemp("provenance-admission")
    tools = ImageTools(workdir / "tools")
    release_key, release_pub = tools.generate_key_pair("release")
    other_key, _ = tools.generate_key_pair("other", version="v3")
    factory = TenantFactory(stack)
    with (
        LocalRegistry(workdir, name="public") as registry,
        LocalRegistry(workdir, name="private", htpasswd_users={"ci": "s3cret"}) as private,
    ):
        tools.login(private.host, "ci", "s3cret")
        # A webhook replica that may speak plain HTTP to these loopback registries, and sees a moved
        # tag at once (no tag cache), registered for this module only.
        env = {
            "LABGATE_PROVENANCE_INSECURE_REGISTRIES": json.dumps([registry.host, private.host]),
            "LABGATE_PROVENANCE_TAG_TTL_SECONDS": "0",
            "LABGATE_PROVENANCE_UNSIGNED_TTL_SECONDS": "0",
        }
        stack.register_webhook(stack.start_webhook(opa_url=stack.opa_url, extra_env=env))
        try:
            team = factory.create(
                spec_extra={
                    "images": {
                        "registries": [registry.host, private.host],
                        "requireSignature": True,
                        "signingKeys": [{"name": "release", "publicKey": release_pub}],
                    }
                }
            )
            yield Lab(stack, tools, registry, private, release_key, other_key, team)
        finally:
            stack.register_webhook(stack.webhook_urls[0])
            factory.cleanup()


def pod(image: str, **spec: Any) -> dict[str, Any]:
    name = f"img-{uuid.uuid4().hex[:6]}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": image}], **spec},
    }


def live_image(lab: Lab, manifest: dict[str, Any]) -> str:
    live = get_json(lab.stack, f"pod/{manifest['metadata']['name']}", "-n", lab.team.namespace)
    assert live is not None
    return str(live["spec"]["containers"][0]["image"])


def test_a_signed_image_is_admitted_and_pinned_to_its_digest(lab: Lab) -> None:
    for version in ("v2", "v3"):
        image = f"{lab.registry.host}/vision/train:{version}"
        digest = lab.tools.push_random_image(image)
        lab.tools.sign(version, lab.release_key, f"{lab.registry.host}/vision/train@{digest}")
        manifest = pod(image)
        result = lab.team.researcher.apply(manifest, lab.team.namespace)
        assert result.returncode == 0, result.stderr
        assert f"labgate pinned {image} to {digest[:19]}" in result.stderr
        assert live_image(lab, manifest) == f"{lab.registry.host}/vision/train@{digest}"


@pytest.mark.parametrize("actor", ["researcher", "admin"])
def test_kubectl_set_image_on_a_running_pod_needs_a_digest_where_images_must_be_signed(
    lab: Lab, actor: str
) -> None:
    # The mutating webhook pins on CREATE only: a tag set on a running pod would stay a tag, and a
    # tag moved after the check would run unsigned. So the update must name the digest.
    who, ns = {"researcher": lab.team.researcher, "admin": lab.team.admin}[actor], lab.team.namespace
    base = f"{lab.registry.host}/vision/set-image-{actor[:3]}"
    first = lab.tools.push_random_image(f"{base}:v1")
    second = lab.tools.push_random_image(f"{base}:v2")
    for digest in (first, second):
        lab.tools.sign("v2", lab.release_key, f"{base}@{digest}")
    manifest = pod(f"{base}:v1")
    assert who.apply(manifest, ns).returncode == 0  # CREATE: judged and pinned
    assert live_image(lab, manifest) == f"{base}@{first}"
    target = f"pod/{manifest['metadata']['name']}"
    refused = who.kubectl("set", "image", target, f"main={base}:v2", "-n", ns)
    assert refused.returncode == 1, refused.stdout
    assert "[image-digest-update]" in refused.stderr, refused.stderr
    assert f'Fix: write it as "{base}@{second}"' in refused.stderr, refused.stderr
    assert live_image(lab, manifest) == f"{base}@{first}"
    allowed = who.kubectl("set", "image", target, f"main={base}@{second}", "-n", ns)
    assert allowed.returncode == 0, allowed.stderr
    assert live_image(lab, manifest) == f"{base}@{second}"


def test_unsigned_and_untrusted_images_are_refused_with_the_image_and_rule(lab: Lab) -> None:
    unsigned = f"{lab.registry.host}/vision/unsigned:v1"
    unsigned_digest = lab.tools.push_random_image(unsigned)
    untrusted = f"{lab.registry.host}/vision/untrusted:v1"
    untrusted_digest = lab.tools.push_random_image(untrusted)
    lab.tools.sign("v3", lab.other_key, f"{lab.registry.host}/vision/untrusted@{untrusted_digest}")
    for image, digest in ((unsigned, unsigned_digest), (untrusted, untrusted_digest)):
        result = lab.team.researcher.apply(pod(image), lab.team.namespace)
        assert result.returncode == 1, result.stdout
        assert "[image-signature]" in result.stderr
        assert digest in result.stderr
        assert "trusted keys: release" in result.stderr
        assert "Fix:" in result.stderr


def test_a_tag_moved_after_signing_is_refused(lab: Lab) -> None:
    image = f"{lab.registry.host}/vision/moving:v1"
    signed = lab.tools.push_random_image(image)
    lab.tools.sign("v2", lab.release_key, f"{lab.registry.host}/vision/moving@{signed}")
    assert lab.team.researcher.apply(pod(image), lab.team.namespace).returncode == 0
    moved = lab.tools.push_random_image(image)
    result = lab.team.researcher.apply(pod(image), lab.team.namespace)
    assert result.returncode == 1
    assert "[image-signature]" in result.stderr
    assert moved in result.stderr


def test_an_image_from_another_registry_is_refused(lab: Lab) -> None:
    result = lab.team.researcher.apply(
        pod("registry.lab.example.evil.com/vision/train:v1"), lab.team.namespace
    )
    assert result.returncode == 1
    assert "[image-registry]" in result.stderr
    assert "registry.lab.example.evil.com/vision/train" in result.stderr


def test_a_multi_arch_index_is_pinned_to_the_index_digest(lab: Lab) -> None:
    base = f"{lab.registry.host}/vision/multi"
    amd = lab.tools.push_random_image(f"{base}:amd64", platform="linux/amd64")
    arm = lab.tools.push_random_image(f"{base}:arm64", platform="linux/arm64")
    index = lab.tools.push_index(f"{base}:v1", [f"{base}@{amd}", f"{base}@{arm}"])
    lab.tools.sign("v2", lab.release_key, f"{base}@{index}")
    manifest = pod(f"{base}:v1")
    result = lab.team.researcher.apply(manifest, lab.team.namespace)
    assert result.returncode == 0, result.stderr
    assert live_image(lab, manifest) == f"{base}@{index}"
    assert index not in (amd, arm)


def test_a_private_registry_is_read_with_the_pods_pull_secret(lab: Lab) -> None:
    image = f"{lab.private.host}/vision/secret:v1"
    digest = lab.tools.push_random_image(image)
    lab.tools.sign("v2", lab.release_key, f"{lab.private.host}/vision/secret@{digest}")
    without = lab.team.researcher.apply(pod(image), lab.team.namespace)
    assert without.returncode == 1
    assert "[image-unverifiable]" in without.stderr
    created = lab.team.researcher.kubectl(
        "create",
        "secret",
        "docker-registry",
        "private-pull",
        "-n",
        lab.team.namespace,
        f"--docker-server={lab.private.host}",
        "--docker-username=ci",
        "--docker-password=s3cret",
    )
    assert created.returncode == 0, created.stderr
    manifest = pod(image, imagePullSecrets=[{"name": "private-pull"}])
    result = lab.team.researcher.apply(manifest, lab.team.namespace)
    assert result.returncode == 0, result.stderr
    assert live_image(lab, manifest) == f"{lab.private.host}/vision/secret@{digest}"


def test_a_registry_that_is_down_gives_a_clear_refusal(lab: Lab, tmp_path: Path) -> None:
    with LocalRegistry(tmp_path, name="doomed") as doomed:
        host = doomed.host
    lab.stack.admin_kubectl(
        "patch",
        "tenant",
        lab.team.name,
        "--type=json",
        "-p",
        json.dumps([{"op": "add", "path": "/spec/images/registries/-", "value": host}]),
    )
    result = lab.team.researcher.apply(pod(f"{host}/vision/train:v1"), lab.team.namespace)
    assert result.returncode == 1
    assert "[image-unverifiable]" in result.stderr
    assert re.search(rf"{re.escape(host)}", result.stderr)
