"""The GPU nodes the reconciler watches, kept as a summary (labels, GPU model, whole GPUs): what the
nodes of each tenant's pools hold (labgate.gpu_accounting.pool_capacity), for its status, and each
node's GPU model, for what a tenant's pods hold outside Kueue (rbac/queue_holdings.py).

Only a change to a node's GPUs, model or labels asks for the tenants' statuses: the kubelet's
status updates (conditions, images) are dropped here. Not part of the reconciler's readiness: a
reconciler that cannot list nodes writes its statuses as before, without what the pools hold.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from labgate.core.api_resources import Object
from labgate.core.tenant import Tenant
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.pool_capacity import ModelCapacity, NodeGpus, node_gpus, pool_capacity


class NodeIndex:
    """The nodes with GPUs, by name, fed by a Reflector's `on_list` and `on_event`."""

    def __init__(self, counting: GpuCounting, on_changed: Callable[[], None]):
        """`on_changed()`: some node's GPUs or labels changed (every tenant's status may say other)."""
        self._counting = counting
        self._on_changed = on_changed
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeGpus] = {}
        # The last capacities by pools' nodeSelectors, until a node changes: a tenant's status is
        # written after every settlement of its pods, and the nodes rarely change meanwhile.
        self._capacities: dict[tuple[tuple[tuple[str, str], ...], ...], dict[str, ModelCapacity] | None] = {}
        self.is_synced = False

    def on_list(self, objects: list[Object]) -> None:
        nodes = {n.name: n for o in objects if (n := node_gpus(o, self._counting)) is not None}
        with self._lock:
            changed = nodes != self._nodes or not self.is_synced
            self._nodes, self.is_synced = nodes, True
            if changed:
                self._capacities = {}
        if changed:
            self._on_changed()

    def on_event(self, kind: str, obj: Object) -> None:
        name = str(obj["metadata"]["name"])
        node = None if kind == "DELETED" else node_gpus(obj, self._counting)
        with self._lock:
            if self._nodes.get(name) == node:
                return  # a heartbeat, or a node without GPUs
            if node is None:
                del self._nodes[name]
            else:
                self._nodes[name] = node
            self._capacities = {}
        self._on_changed()

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
