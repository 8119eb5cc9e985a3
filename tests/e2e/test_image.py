"""The shipped container image, built from this checkout without Docker (toolchain/build-image.sh) and
run with containerd and runc: it holds what the Dockerfile installs, and its `labgate serve` and
`labgate reconcile` answer a real apiserver's admission requests with real OPA decisions.

The first run builds the image (a Debian base once, then the Dockerfile's layer); later runs reuse it
while the Dockerfile, the files it copies and the lock file are unchanged. Skipped, with the reason,
where containers cannot run (not root, or containerd/runc/debootstrap/umoci not installed)."""

from __future__ import annotations

import json
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devcluster.containerd import Containerd, ContainerLauncher, containerd_problem
from devcluster.image import (
    DOCKERFILE,
    BuiltImage,
    ImageConfig,
    build,
    copied_packages,
    expected_distributions,
    image_config,
    missing_build_tools,
    parse_dockerfile,
    project_version,
    read_lock,
)
from devcluster.stack import LabgateStack
from tests.e2e.conftest import TenantFactory, pod_manifest

# A cold build (debootstrap, PyPI downloads) takes minutes on a loaded two-core machine.
pytestmark = [pytest.mark.image, pytest.mark.timeout(1200)]

# What the container reports about itself: its user, its installed distributions and the top-level
# names the labgate distribution installed (from its RECORD), and which of our packages import.
_INSPECT = r"""
import importlib.metadata as md, importlib.util, json, os, sys
site = [p for p in sys.path if p.endswith("-packages") and p.startswith("/usr/local/")]
dists = {d.metadata["Name"]: d.version for d in md.distributions(path=site)}
record = md.distribution("labgate").files or []
top = sorted({f.parts[0] for f in record if f.suffix == ".py" and len(f.parts) > 1})
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "site": site, "dists": dists, "labgate_top_level": top,
    "importable": {m: importlib.util.find_spec(m) is not None
                   for m in ("cli", "labgate", "webhook", "rbac", "devcluster", "tests")},
    "src_exists": os.path.exists("/src"),
}))
"""


def _dockerfile() -> ImageConfig:
    return image_config(parse_dockerfile(DOCKERFILE.read_text()))


@pytest.fixture(scope="module")
def built_image() -> BuiltImage:
    problem = containerd_problem()
    if problem is None and (missing := missing_build_tools()):
        problem = f"not installed: {', '.join(missing)} (apt-get install debootstrap umoci)"
    if problem is not None:
        pytest.skip(f"the image cannot be built and run here: {problem}")
    return build()


@pytest.fixture(scope="module")
def containerd(tmp_path_factory: pytest.TempPathFactory, built_image: BuiltImage) -> Iterator[Containerd]:
    with Containerd(tmp_path_factory.mktemp("containerd")) as daemon:
        yield daemon
    assert daemon.process is None, "containerd was stopped"
    assert daemon.leftover_processes() == [], "nothing that containerd started is left running"


@pytest.fixture(scope="module")
def image(containerd: Containerd, built_image: BuiltImage) -> str:
    reference = containerd.import_image(built_image.archive)
    assert reference == f"ghcr.io/labgate/labgate:{project_version()}"
    return reference


@pytest.fixture(scope="module")
def image_stack(
    tmp_path_factory: pytest.TempPathFactory, containerd: Containerd, image: str
) -> Iterator[LabgateStack]:
    """The local control plane and OPA as usual; the webhook and the reconciler in the image."""
    config = _dockerfile()
    uid, gid = (int(part) for part in config.user.split(":"))
    launcher = ContainerLauncher(containerd, image, user=(uid, gid), cmd=config.cmd)
    with LabgateStack(
        tmp_path_factory.mktemp("image-cluster"), launcher=launcher, reconciler_lease_seconds=4
    ) as started:
        yield started


@pytest.fixture
def image_tenants(image_stack: LabgateStack) -> Iterator[TenantFactory]:
    factory = TenantFactory(image_stack)
    try:
        yield factory
    finally:
        factory.cleanup()


def _oci_config(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> Any:
            handle = tar.extractfile(f"./blobs/sha256/{digest.removeprefix('sha256:')}")
            assert handle is not None
            return json.load(handle)

        handle = tar.extractfile("./index.json")
        assert handle is not None
        (manifest,) = json.load(handle)["manifests"]
        config: dict[str, Any] = blob(blob(manifest["digest"])["config"]["digest"])
        return config


def test_the_image_config_is_the_dockerfiles(built_image: BuiltImage) -> None:
    dockerfile = _dockerfile()
    config = _oci_config(built_image.archive)["config"]
    assert config["Entrypoint"] == dockerfile.entrypoint == ["labgate"]
    assert config["Cmd"] == dockerfile.cmd == ["serve"]
    assert config["User"] == dockerfile.user == "65532:65532"
    assert sorted(config["ExposedPorts"]) == sorted(dockerfile.exposed_ports) == ["8080/tcp", "8443/tcp"]
    assert config["WorkingDir"] == dockerfile.workdir == "/"
    env = dict(item.split("=", 1) for item in config["Env"])
    assert {k: env.get(k) for k in dockerfile.env} == dockerfile.env
    assert config["Labels"]["dev.labgate.inputs"] == built_image.inputs


def test_the_image_holds_what_the_dockerfile_installs(containerd: Containerd, image: str) -> None:
    report = json.loads(containerd.run_once("inspect", image, ["python3", "-c", _INSPECT]))
    lock = read_lock()
    assert (report["uid"], report["gid"]) == (65532, 65532)
    assert report["site"] == ["/usr/local/lib/python3.11/dist-packages"]
    installed = {name.lower().replace("_", "-"): version for name, version in report["dists"].items()}
    # Exactly `pip install .` with the lock: labgate and its pinned dependencies, nothing else.
    assert set(installed) == expected_distributions(lock)
    assert installed.pop("labgate") == project_version()
    assert installed == {name: lock[name] for name in installed}
    # The packages the Dockerfile copies, and no others: no dev cluster, no tests.
    assert report["labgate_top_level"] == sorted(copied_packages(parse_dockerfile(DOCKERFILE.read_text())))
    assert report["labgate_top_level"] == ["cli", "labgate", "rbac", "webhook"]
    assert report["importable"] == {
        "cli": True,
        "labgate": True,
        "webhook": True,
        "rbac": True,
        "devcluster": False,
        "tests": False,
    }
    assert report["src_exists"] is False


def test_the_containers_answer_admission_requests(
    image_stack: LabgateStack, image_tenants: TenantFactory
) -> None:
    # Only containers run labgate here: every webhook and reconciler process is a `ctr run` of the image.
    labgate_processes = [p for p in image_stack.processes if p.name.startswith(("webhook-", "reconciler-"))]
    assert [p.name for p in labgate_processes] == ["webhook-0", "reconciler-0"]
    assert all(Path(p.argv[0]).name == "ctr" and "run" in p.argv for p in labgate_processes)
    # The reconciler in the container provisions the tenants (TenantFactory waits for Ready) ...
    mine, theirs = image_tenants.create(), image_tenants.create()
    assert image_stack.admin_kubectl("get", "rolebindings", "-n", mine.namespace, "-o", "name").strip()
    image_tenants.open_rbac(theirs.namespace, *mine.researcher.groups)
    # ... and the webhook in the container admits and refuses with OPA's verdicts.
    admitted = mine.researcher.apply(pod_manifest("train-1"), mine.namespace)
    assert admitted.returncode == 0, admitted.stderr
    assert admitted.stdout.strip() == "pod/train-1 created"
    refused = mine.researcher.apply(pod_manifest("sneaky"), theirs.namespace)
    assert refused.returncode == 1
    who = mine.researcher
    assert (
        f'admission webhook "validate.labgate.io" denied the request: [tenant-membership] '
        f'user "{who.name}" (groups: {who.groups[0]}) may not create Pod "sneaky" in namespace '
        f'"{theirs.namespace}": it belongs to tenant "{theirs.name}" and only its members may.'
    ) in refused.stderr
    assert theirs.admin.kubectl("get", "pod", "sneaky", "-n", theirs.namespace).returncode == 1
    # The decision log was written by the image's user: the container, not a host process, decided.
    log = image_stack.workdir / "logs" / "decisions-0.jsonl"
    assert log.stat().st_uid == 65532
    records = [json.loads(line) for line in log.read_text().splitlines()]
    verdicts = {
        (r["object"].get("namespace"), r["object"].get("name")): r["verdict"]
        for r in records
        if r["object"].get("name") in ("train-1", "sneaky")
    }
    assert verdicts == {(mine.namespace, "train-1"): "allowed", (theirs.namespace, "sneaky"): "refused"}
