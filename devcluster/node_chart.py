"""labgate's Helm chart on a real node (devcluster.node_cluster): its three images pushed to the node's
registry and the values that pin each of them by digest.

    release = install_chart(cluster, build().archive, workdir)    # pushed by digest, installed, ready
    release.images, release.values, release.seconds               # what it ran, with, and took

    images = push_chart_images(cluster, build().archive, workdir)   # the steps install_chart takes
    values = chart_values(images, apiserver_address=..., client_ca_pem=...)
    seconds = helm_install(kubeconfig, values, workdir)            # `helm install --wait` to ready
    chart, policies = chart_with_policies(workdir)                 # a copy whose policies/ you edit
    pods = release_pods(kubeconfig, "webhook")                     # the chart's webhook pods, as the API lists them
    seconds = helm_upgrade(kubeconfig, chart, values, workdir)     # `helm upgrade --wait`, rolled out

The labgate image is the one toolchain/build-image.sh builds (devcluster.image). OPA and the
pre-delete hook's kubectl are the pinned static binaries of the toolchain, each packed as a one-file
image as the pause image is (devcluster.node_images): nothing comes from a registry outside the machine.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devcluster.kubectl import kubectl
from devcluster.node_cluster import NodeCluster
from devcluster.node_images import push_binary_image
from devcluster.registry import ImageTools
from devcluster.tools import REPO_ROOT, binary, tool

CHART = REPO_ROOT / "charts" / "labgate"
RELEASE = "labgate"
NAMESPACE = "labgate-system"
# The pre-delete hook runs `kubectl` by name: the one-file image puts it on its PATH.
HOOK_PATH = "/"


@dataclass(frozen=True)
class ChartImages:
    """Each image the chart runs, as repository and digest (the chart's image.repository/image.digest)."""

    labgate: str
    opa: str
    kubectl: str


def split_reference(reference: str) -> dict[str, str]:
    """`host/repo@sha256:...` as the chart's image block: {"repository": ..., "digest": ...}."""
    repository, _, digest = reference.partition("@")
    if not digest.startswith("sha256:"):
        raise ValueError(f"not a reference by digest: {reference}")
    return {"repository": repository, "digest": digest}


def push_oci_archive(tools: ImageTools, archive: Path, repository: str, workdir: Path) -> str:
    """Push the OCI archive devcluster.image builds (a tar of an OCI layout) to `repository`; its
    reference by digest."""
    layout = workdir / "labgate-oci"
    layout.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as packed:
        packed.extractall(layout, filter="data")
    reference = f"{repository}:build"
    tools.run([str(tool("crane").binary()), "push", str(layout), reference, "--insecure"], timeout=300)
    return f"{repository}@{tools.crane('digest', reference)}"


def push_chart_images(cluster: NodeCluster, labgate_archive: Path, workdir: Path) -> ChartImages:
    """Push labgate's image, OPA's and kubectl's to the node's registry; each by digest."""
    host = cluster.registry.host
    labgate = push_oci_archive(cluster.images, labgate_archive, f"{host}/labgate/labgate", workdir)
    opa = push_binary_image(cluster.images, tool("opa").binary(), f"{host}/labgate/opa")
    kubectl = push_binary_image(
        cluster.images,
        tool("kubernetes").binary("kubectl"),
        f"{host}/labgate/kubectl",
        env={"PATH": HOOK_PATH},
    )
    return ChartImages(labgate=labgate, opa=opa, kubectl=kubectl)


# The namespace the node installs leave out of admission besides kube-system and the release's.
SPARED_NAMESPACE = "monitoring"


def chart_values(images: ChartImages, *, apiserver_address: str, client_ca_pem: bytes) -> dict[str, Any]:
    """The values of the install: every image by digest, two webhook replicas, the chart's own
    (self-signed) certificates, the apiserver's client certificate required by the webhook, one
    namespace spared from admission."""
    return {
        "image": {**split_reference(images.labgate), "pullPolicy": "IfNotPresent"},
        "opa": {"image": split_reference(images.opa)},
        "preDeleteHook": {"image": split_reference(images.kubectl)},
        "certificates": {"mode": "self-signed"},
        "webhook": {
            "replicas": 2,
            "clientAuth": {"required": True, "caBundle": base64.b64encode(client_ca_pem).decode()},
            "networkPolicy": {"apiserverCIDRs": [f"{apiserver_address}/32"]},
            # A namespace the infra team spares from admission: no Tenant may hold it.
            "exemptNamespaces": [SPARED_NAMESPACE],
        },
    }


def helm(kubeconfig: Path, *args: str, timeout: float = 360.0) -> subprocess.CompletedProcess[str]:
    """`helm --kubeconfig KUBECONFIG ARGS...`; never raises on a non-zero exit (callers assert)."""
    return subprocess.run(
        [str(tool("helm").binary()), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        # helm's own cache and configuration beside the kubeconfig, never in the user's home.
        env={"PATH": str(Path(binary("kubectl")).parent), "HOME": str(kubeconfig.parent / "helm-home")},
    )


def helm_install(kubeconfig: Path, values: dict[str, Any], workdir: Path) -> float:
    """`helm install labgate charts/labgate --wait` into NAMESPACE; the seconds until every
    Deployment of the chart was ready."""
    return _helm_release(kubeconfig, "install", CHART, values, workdir, "--create-namespace")


def helm_upgrade(kubeconfig: Path, chart: Path, values: dict[str, Any], workdir: Path) -> float:
    """`helm upgrade labgate CHART --wait` with `values` (all of them, as an infra team keeps them in
    one file); the seconds until every Deployment of the chart had rolled out and was ready."""
    return _helm_release(kubeconfig, "upgrade", chart, values, workdir)


def _helm_release(
    kubeconfig: Path, verb: str, chart: Path, values: dict[str, Any], workdir: Path, *flags: str
) -> float:
    values_file = workdir / f"values-{verb}.json"
    values_file.write_text(json.dumps(values))
    began = time.monotonic()
    released = helm(
        kubeconfig,
        verb,
        RELEASE,
        str(chart),
        "--namespace",
        NAMESPACE,
        *flags,
        "--values",
        str(values_file),
        "--wait",
        "--timeout",
        "5m",
    )
    if released.returncode != 0:
        raise RuntimeError(f"helm {verb} failed: {released.stderr.strip()}")
    return round(time.monotonic() - began, 1)


@dataclass(frozen=True)
class ChartRelease:
    """The chart as installed on the node: its images, the values it was installed with and the
    seconds `helm install --wait` took to ready."""

    images: ChartImages
    values: dict[str, Any]
    seconds: float


def install_chart(cluster: NodeCluster, labgate_archive: Path, workdir: Path) -> ChartRelease:
    """Push the chart's images to the node's registry and `helm install` it with chart_values (the
    node's apiserver address and webhook client CA), as every node test installs it."""
    images = push_chart_images(cluster, labgate_archive, workdir)
    values = chart_values(
        images,
        apiserver_address=cluster.network.host_address,
        client_ca_pem=cluster.control_plane.webhook_client_ca_file.read_bytes(),
    )
    seconds = helm_install(cluster.control_plane.admin_kubeconfig, values, workdir)
    return ChartRelease(images, values, seconds)


def chart_with_policies(workdir: Path) -> tuple[Path, Path]:
    """A copy of the chart whose policies/ is a real copy of the repository's (the symlink followed):
    what the infra team edits before `helm upgrade`. (the chart, its policies/ directory)"""
    chart = workdir / "chart" / "labgate"
    shutil.copytree(CHART, chart, symlinks=False)
    return chart, chart / "policies"


def provenance_values(registry_host: str) -> dict[str, Any]:
    """The webhook's registry settings for the node's registry (plain HTTP at the host end of the
    node's veth), so that tenants' image rules (signatures) can be checked against it."""
    return {"webhook": {"provenance": {"insecureRegistries": [registry_host]}}}


def release_pods(kubeconfig: Path, component: str) -> list[dict[str, Any]]:
    """The release's pods of `component` (webhook, reconciler, ...) in NAMESPACE, as the API lists them."""
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component={component}"
    listed = kubectl(kubeconfig, "get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json")
    if listed.returncode != 0:
        raise RuntimeError(f"kubectl get pods: {listed.stderr.strip()}")
    pods: list[dict[str, Any]] = json.loads(listed.stdout)["items"]
    return pods
