"""A local control plane with one real node (devcluster.node) and a registry the node pulls from.

    with NodeCluster(workdir) as cluster:
        cluster.control_plane.admin_kubeconfig     # kube-apiserver at the host end of the node's veth
        cluster.push_binary(path, "labgate/echo")  # registry-host/labgate/echo@sha256:...
        cluster.node.name                          # Ready

    with NodeCluster(workdir, private_registry_users={"puller": password}) as cluster:
        cluster.push_private_binary(path, "team/tool")   # private-host/team/tool@sha256:..., pulled
                                                         # only with the credentials (htpasswd, Basic)

The order matters: the node's network first (the apiserver and the registry listen on its host end),
then the control plane (with kube-scheduler, every controller, the Node authorizer), the registry
(and the private one, when asked for), the pause image built from the pinned Kubernetes sources, and
the node. `stop()` undoes it all by pid, newest first, and `leftovers()` lists what of it the host
still holds (empty after stop).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from devcluster.controlplane import DEFAULT_CONTROLLERS, LocalControlPlane
from devcluster.node import RealNode
from devcluster.node_images import build_pause, push_binary_image
from devcluster.node_network import NodeNetwork
from devcluster.processes import Lifecycle, stop_recorded
from devcluster.registry import ImageTools, LocalRegistry

T = TypeVar("T")
P = TypeVar("P")


class NodeCluster(Lifecycle):
    """The control plane, the registry and the real node, started and stopped together."""

    def __init__(
        self,
        workdir: Path,
        *,
        network_policies: bool = True,
        detached: bool = False,
        private_registry_users: dict[str, str] | None = None,
    ):
        """`network_policies`: the node enforces NetworkPolicies (devcluster.node_enforcer), as a
        cluster that runs labgate does. `detached`: the processes outlive this Python process;
        `stop_detached(workdir)` ends them. `private_registry_users` (user: password): a second
        plain-HTTP registry beside the open one, behind htpasswd (Basic) auth for those users, which
        the node may reach but pulls from only with a pod's pull secret; `self.images` pushes to it
        as the first of them."""
        self.workdir = workdir
        self.network_policies = network_policies
        self.detached = detached
        self.private_registry_users = None if private_registry_users is None else dict(private_registry_users)
        self.images = ImageTools(workdir / "images")
        self._network: NodeNetwork | None = None
        self._control_plane: LocalControlPlane | None = None
        self._registry: LocalRegistry | None = None
        self._private_registry: LocalRegistry | None = None
        self._node: RealNode | None = None
        self.bring_up_seconds: dict[str, float] = {}

    @property
    def network(self) -> NodeNetwork:
        return _started(self._network, "network")

    @property
    def control_plane(self) -> LocalControlPlane:
        return _started(self._control_plane, "control plane")

    @property
    def registry(self) -> LocalRegistry:
        return _started(self._registry, "registry")

    @property
    def private_registry(self) -> LocalRegistry:
        """The registry behind credentials (only when `private_registry_users` was given)."""
        return _started(self._private_registry, "private registry")

    @property
    def node(self) -> RealNode:
        return _started(self._node, "node")

    def start(self) -> None:
        """Start every part; `bring_up_seconds` says how long each took. Undoes all if one fails."""
        try:
            network = self._network = self._timed("network", NodeNetwork.claim)
            _network_record(self.workdir).parent.mkdir(parents=True, exist_ok=True)
            _network_record(self.workdir).write_text(json.dumps(dataclasses.asdict(network)))
            self._control_plane = LocalControlPlane(
                self.workdir / "controlplane",
                detached=self.detached,
                with_scheduler=True,
                controllers=DEFAULT_CONTROLLERS,
                address=network.host_address,
                real_nodes=True,
            )
            self._timed("control plane", self._control_plane.start)
            self._registry = LocalRegistry(self.workdir, address=network.host_address, detached=self.detached)
            self._timed("registry", self._registry.start)
            if self.private_registry_users is not None:
                self._timed("private registry", self._start_private_registry)
            pause = self._timed("pause image", self._push_pause)
            self._node = RealNode(
                self.workdir / "node",
                network=network,
                control_plane=self._control_plane,
                sandbox_image=pause,
                registries=self._registry_hosts(),
                network_policies=self.network_policies,
                detached=self.detached,
            )
            self._timed("node Ready", self._node.start)
        except BaseException:
            self.stop()
            raise

    def _start_private_registry(self) -> None:
        users = self.private_registry_users or {}
        if not users:
            raise ValueError("a private registry needs at least one user")
        self._private_registry = LocalRegistry(
            self.workdir,
            name="private-registry",
            htpasswd_users=users,
            address=self.network.host_address,
            detached=self.detached,
        )
        self._private_registry.start()
        # crane and cosign of `self.images` push to it as its first user.
        user, password = next(iter(users.items()))
        self.images.login(self._private_registry.host, user, password)

    def _registry_hosts(self) -> tuple[str, ...]:
        """The plain-HTTP registries the node may pull from (containerd's hosts.toml)."""
        private = (self._private_registry.host,) if self._private_registry is not None else ()
        return (self.registry.host, *private)

    def _timed(self, step: str, action: Callable[[], T]) -> T:
        began = time.monotonic()
        result = action()
        self.bring_up_seconds[step] = round(time.monotonic() - began, 1)
        return result

    def _push_pause(self) -> str:
        return self.push_binary(build_pause(self.workdir / "build"), "labgate/pause")

    def push_binary(self, binary: Path, repository: str) -> str:
        """Push `binary` as a one-file image to the registry; its reference by digest."""
        return push_binary_image(self.images, binary, f"{self.registry.host}/{repository}")

    def push_private_binary(
        self, binary: Path, repository: str, *, env: Mapping[str, str] | None = None
    ) -> str:
        """Push `binary` as a one-file image to the private registry (with its first user's
        credentials); its reference by digest, which the node pulls only with credentials.
        `env`: the image's environment (a different one makes a different digest)."""
        return push_binary_image(self.images, binary, f"{self.private_registry.host}/{repository}", env=env)

    def stop(self) -> None:
        """Stop the node, the registries and the control plane by pid; delete the network. Every step
        runs even when an earlier one fails (the first failure is raised at the end)."""
        parts = (self._node, self._private_registry, self._registry, self._control_plane, self._network)
        steps = [
            part.delete if isinstance(part, NodeNetwork) else part.stop for part in parts if part is not None
        ]
        failures: list[BaseException] = []
        for step in steps:
            try:
                step()
            except Exception as error:  # reported below, after the other steps ran
                failures.append(error)
        _network_record(self.workdir).unlink(missing_ok=True)
        if failures:
            raise failures[0]

    def leftovers(self) -> list[str]:
        """What the cluster left on the host: empty after stop()."""
        found = self._node.leftovers() if self._node is not None else []
        return found + (self._network.leftovers() if self._network is not None else [])


def _network_record(workdir: Path) -> Path:
    return workdir / "node-network.json"


def stop_detached(workdir: Path) -> list[str]:
    """Stop a detached NodeCluster of `workdir` from another process (`python -m devcluster down`):
    its processes by their recorded pids (each only while it is still the one recorded), then what
    the node leaves (its pods' processes, containerd's shims, cgroups, state) and its network."""
    record = _network_record(workdir)
    if not record.is_file():
        return []
    network = NodeNetwork(**json.loads(record.read_text()))
    stopped = (
        stop_recorded(workdir / "node") + stop_recorded(workdir) + stop_recorded(workdir / "controlplane")
    )
    RealNode(workdir / "node", network=network, control_plane=_NoControlPlane(), sandbox_image="").stop()
    network.delete()
    record.unlink()
    return [*stopped, f"node network {network.name}"]


class _NoControlPlane:
    """What stopping a node needs of its control plane: nothing (stop() never calls it)."""

    @property
    def ca_pem(self) -> bytes:
        raise RuntimeError("not needed to stop a node")

    @property
    def admin_kubeconfig(self) -> Path:
        raise RuntimeError("not needed to stop a node")

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        raise RuntimeError("not needed to stop a node")


def _started(part: P | None, what: str) -> P:
    if part is None:
        raise RuntimeError(f"the {what} is not started")
    return part
