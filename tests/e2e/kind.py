"""The same e2e suite on a kind cluster (pytest-kind), for machines with a Docker engine.

The apiserver runs inside the kind node container; OPA and the webhook run on this host, and the
webhook is registered at the Docker network gateway, which the node reaches. Researchers are client
certificates signed by the kind cluster's own CA, read from the node.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from devcluster.controlplane import write_kubeconfig
from devcluster.stack import LabgateStack
from devcluster.tools import binary, pinned_versions
from labgate.core.certificates import KeyPair, issue_client_cert

_versions = pinned_versions()
os.environ.setdefault("KIND_VERSION", _versions["KIND_VERSION"])

from pytest_kind import KindCluster  # noqa: E402 - reads KIND_VERSION when imported


def _docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout  # noqa: S607


class KindControlPlane:
    """A kind cluster behind the same surface as LocalControlPlane."""

    def __init__(self, workdir: Path, name: str = "labgate-e2e"):
        self.workdir = workdir
        self.kind = KindCluster(
            name, kubeconfig=workdir / "admin.kubeconfig", image=_versions["KIND_NODE_IMAGE"]
        )
        self._ca: KeyPair | None = None

    @property
    def server(self) -> str:
        config = json.loads(
            subprocess.run(
                [
                    binary("kubectl"),
                    f"--kubeconfig={self.admin_kubeconfig}",
                    "config",
                    "view",
                    "--raw",
                    "-o",
                    "json",
                ],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        return str(config["clusters"][0]["cluster"]["server"])

    @property
    def admin_kubeconfig(self) -> Path:
        return Path(self.kind.kubeconfig_path)

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        if self._ca is None:
            raise RuntimeError("kind cluster not started")
        path = self.workdir / "kubeconfigs" / f"{user}@{'+'.join(sorted(groups))}.kubeconfig"
        if not path.exists():
            client = issue_client_cert(self._ca, user=user, groups=groups)
            write_kubeconfig(path, server=self.server, ca_pem=self._ca.cert_pem, client=client, user=user)
        return path

    def start(self) -> None:
        self.kind.create()
        node = f"{self.kind.name}-control-plane"
        self._ca = KeyPair(
            cert_pem=_docker("exec", node, "cat", "/etc/kubernetes/pki/ca.crt").encode(),
            key_pem=_docker("exec", node, "cat", "/etc/kubernetes/pki/ca.key").encode(),
        )

    def stop(self) -> None:
        self.kind.delete()

    def gateway_address(self) -> str:
        """The host's IPv4 address on the kind Docker network, which the node container can reach."""
        networks = json.loads(_docker("network", "inspect", "kind"))
        for config in networks[0]["IPAM"]["Config"]:
            gateway = str(config.get("Gateway", ""))
            if gateway and ":" not in gateway:
                return gateway
        raise RuntimeError("the kind Docker network has no IPv4 gateway")


def kind_stack(workdir: Path, *, reconciler_lease_seconds: float) -> Iterator[LabgateStack]:
    """LabgateStack on kind: yields once it is ready, deletes the kind cluster afterwards."""
    control_plane = KindControlPlane(workdir)
    control_plane.start()
    try:
        stack = LabgateStack(
            workdir, control_plane=control_plane, webhook_host=control_plane.gateway_address()
        )
        with stack:
            yield stack
    finally:
        control_plane.stop()
