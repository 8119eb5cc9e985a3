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

import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from devcluster.controlplane import DEFAULT_CONTROLLERS, LocalControlPlane
from devcluster.node import RealNode
from devcluster.node_images import build_pause, push_binary_image
from devcluster.node_network import NodeNetwork
from devcluster.registry import ImageTools, LocalRegistry

T = TypeVar("T")


class NodeCluster:
    """The control plane, the registry and the real node, started and stopped together."""

    def __init__(self, workdir: Path, *, network_name: str = "labgate-node-0"):
        self.workdir = workdir
        self.network = NodeNetwork(network_name)
        self.control_plane = LocalControlPlane(
            workdir / "controlplane",
            with_scheduler=True,
            controllers=DEFAULT_CONTROLLERS,
            address=self.network.host_address,
            real_nodes=True,
        )
        self.registry = LocalRegistry(workdir, address=self.network.host_address)
        self.images = ImageTools(workdir / "images")
        self._node: RealNode | None = None
        self.bring_up_seconds: dict[str, float] = {}

    @property
    def node(self) -> RealNode:
        if self._node is None:
            raise RuntimeError("the node is not started")
        return self._node

    def __enter__(self) -> NodeCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start every part; `bring_up_seconds` says how long each took. Undoes all if one fails."""
        try:
            self._timed("network", self.network.create)
            self._timed("control plane", self.control_plane.start)
            self._timed("registry", self.registry.start)
            pause = self._timed("pause image", self._push_pause)
            self._node = RealNode(
                self.workdir / "node",
                network=self.network,
                control_plane=self.control_plane,
                sandbox_image=pause,
                registries=(self.registry.host,),
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
        steps = [self.registry.stop, self.control_plane.stop, self.network.delete]
        failures: list[BaseException] = []
        for step in [self._node.stop] if self._node is not None else []:
            steps.insert(0, step)
        for step in steps:
            try:
                step()
            except Exception as error:  # reported below, after the other steps ran
                failures.append(error)
        if failures:
            raise failures[0]

    def leftovers(self) -> list[str]:
        """What the cluster left on the host: empty after stop()."""
        found = self._node.leftovers() if self._node is not None else []
        return found + self.network.leftovers()
