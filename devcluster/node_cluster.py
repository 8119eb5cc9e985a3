"""A local control plane with one real node (devcluster.node) and a registry the node pulls from.

    with NodeCluster(workdir) as cluster:
        cluster.control_plane.admin_kubeconfig     # kube-apiserver at the host end of the node's veth
        cluster.push_binary(path, "labgate/echo")  # registry-host/labgate/echo@sha256:...
        cluster.node.name                          # Ready

The order matters: the node's network first (the apiserver and the registry listen on its host end),
then the control plane (with kube-scheduler, every controller, the Node authorizer), the registry,
the pause image built from the pinned Kubernetes sources, and the node. `stop()` undoes it all by pid,
newest first, and `leftovers()` lists what of it the host still holds (empty after stop).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
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

    def __init__(self, workdir: Path, *, network_policies: bool = True, detached: bool = False):
        """`network_policies`: the node enforces NetworkPolicies (devcluster.node_enforcer), as a
        cluster that runs labgate does. `detached`: the processes outlive this Python process;
        `stop_detached(workdir)` ends them."""
        self.workdir = workdir
        self.network_policies = network_policies
        self.detached = detached
        self.images = ImageTools(workdir / "images")
        self._network: NodeNetwork | None = None
        self._control_plane: LocalControlPlane | None = None
        self._registry: LocalRegistry | None = None
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
            pause = self._timed("pause image", self._push_pause)
            self._node = RealNode(
                self.workdir / "node",
                network=network,
                control_plane=self._control_plane,
                sandbox_image=pause,
                registries=(self._registry.host,),
                network_policies=self.network_policies,
                detached=self.detached,
            )
            self._timed("node Ready", self._node.start)
        except BaseException:
            self.stop()
            raise

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

    def stop(self) -> None:
        """Stop the node, the registry and the control plane by pid; delete the network. Every step
        runs even when an earlier one fails (the first failure is raised at the end)."""
        parts = (self._node, self._registry, self._control_plane, self._network)
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
