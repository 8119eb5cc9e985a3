"""The nodes the reconciler watches, kept as summaries. Of the GPU nodes, labels, GPU model and whole
GPUs: what the nodes of each tenant's pools hold (labgate.gpu_accounting.pool_capacity), for its
status, and each node's GPU model, for what a tenant's pods hold outside Kueue
(rbac/queue_holdings.py). Of every node, whether it takes pods and its blocking taints' keys: how
many nodes a pod without tolerations can land on (rbac.node_taints), for every tenant's status.

Only a change to a node's GPUs, model, labels, taints, readiness or cordon asks for the tenants'
statuses: the kubelet's other status updates (heartbeats, images) are dropped here. Not part of the reconciler's readiness: a
reconciler that cannot list nodes writes its statuses as before, without what the pools hold.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from labgate.core.api_resources import Object
from labgate.core.tenant import Tenant
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.pool_capacity import ModelCapacity, NodeGpus, node_gpus, pool_capacity
from rbac.node_taints import NodeTaints, node_taints, open_nodes


class NodeIndex:
    """The nodes with GPUs, and every node's taints, by name, fed by a Reflector's `on_list` and
    `on_event`."""

    def __init__(self, counting: GpuCounting, on_changed: Callable[[], None]):
        """`on_changed()`: some node's GPUs, labels or taints changed (every tenant's status may say
        other)."""
        self._counting = counting
        self._on_changed = on_changed
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeGpus] = {}
        self._taints: dict[str, NodeTaints] = {}
        self._open: dict[str, Any] | None = None  # open_nodes of _taints, until a node changes
        # The last capacities by pools' nodeSelectors, until a node changes: a tenant's status is
        # written after every settlement of its pods, and the nodes rarely change meanwhile.
        self._capacities: dict[tuple[tuple[tuple[str, str], ...], ...], dict[str, ModelCapacity] | None] = {}
        self.is_synced = False

    def on_list(self, objects: list[Object]) -> None:
        nodes = {n.name: n for o in objects if (n := node_gpus(o, self._counting)) is not None}
        taints = {str(o["metadata"]["name"]): node_taints(o) for o in objects}
        with self._lock:
            changed = nodes != self._nodes or taints != self._taints or not self.is_synced
            self._nodes, self._taints, self.is_synced = nodes, taints, True
            if changed:
                self._capacities, self._open = {}, None
        if changed:
            self._on_changed()

    def on_event(self, kind: str, obj: Object) -> None:
        name = str(obj["metadata"]["name"])
        node = None if kind == "DELETED" else node_gpus(obj, self._counting)
        taints = None if kind == "DELETED" else node_taints(obj)
        with self._lock:
            if self._nodes.get(name) == node and self._taints.get(name) == taints:
                return  # a heartbeat
            _replace(self._nodes, name, node)
            _replace(self._taints, name, taints)
            self._capacities, self._open = {}, None
        self._on_changed()

    def open_nodes(self) -> dict[str, Any] | None:
        """status.nodes: the nodes a pod without tolerations can land on, and the taint keys that
        keep the others (rbac.node_taints.open_nodes); None until the nodes are listed."""
        if not self.is_synced:
            return None
        with self._lock:
            if self._open is None:
                self._open = open_nodes(self._taints.values())
            return dict(self._open)

    def node_models(self) -> dict[str, str] | None:
        """Each GPU node's model ("" none) by name; None until the nodes are listed."""
        if not self.is_synced:
            return None
        with self._lock:
            return {name: node.model for name, node in self._nodes.items()}

    def capacity_of(self, tenant: Tenant) -> dict[str, ModelCapacity] | None:
        """Per model, what the nodes of the tenant's pools hold; None when unknown (not listed yet,
        or labgate cannot tell: see pool_capacity)."""
        if not self.is_synced:
            return None
        pools = tenant.spec.placement.node_pools
        key = tuple(tuple(sorted(pool.node_selector.items())) for pool in pools)
        with self._lock:
            if key not in self._capacities:
                self._capacities[key] = pool_capacity(pools, list(self._nodes.values()))
            return self._capacities[key]


_Summary = TypeVar("_Summary")


def _replace(summaries: dict[str, _Summary], name: str, summary: _Summary | None) -> None:
    """The node's summary set, or removed (None: deleted, or a node without GPUs)."""
    if summary is None:
        summaries.pop(name, None)
    else:
        summaries[name] = summary
