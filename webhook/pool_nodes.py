"""The nodes a Tenant's pools select, read live when a Tenant is applied: what they hold per GPU model,
for the warning that a quota is beyond them (tenant-quota-beyond-pools, on CREATE and UPDATE).

The Tenant's status says the same (the reconciler's Node watch, status.gpu.pools), but a new Tenant
has no status yet, and an update that changes its pools' nodeSelectors outgrows the status it has.
Tenant writes are rare and made by the infra team, so the webhook lists the nodes of each pool's
nodeSelector (one list per distinct selector) rather than watching every node. Only for a warning:
the caller bounds the time and drops any failure (webhook.facts).

Which resources are GPUs, and which label names their model, are the policies' config
(`GpuCounting`, from <policy_dir>/labgate/config/data.json; see `gpu_counting`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from labgate.core.api_resources import NODE
from labgate.core.kube import KubeApi
from labgate.core.tenant import NodePool, Placement
from labgate.gpu_accounting.demand import GpuCounting
from labgate.gpu_accounting.pool_capacity import (
    NodeGpus,
    PoolCapacityDocument,
    capacity_document,
    node_gpus,
    pool_capacity,
)

log = logging.getLogger(__name__)

# Each list of a pool's nodes; the caller bounds the whole read too.
LIST_TIMEOUT_SECONDS = 2.0


def gpu_counting(policy_dir: Path | None) -> GpuCounting:
    """The GPU keys of the policies' config (<policy_dir>/labgate/config/data.json), read once at start;
    NVIDIA's defaults when the webhook has no policy dir (OPA loads its own) or the file is unreadable."""
    config = None if policy_dir is None else policy_dir / "labgate" / "config" / "data.json"
    if config is None or not config.is_file():
        return GpuCounting()
    try:
        return GpuCounting.model_validate(json.loads(config.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError):
        log.exception("GPU keys of %s unreadable; counting nvidia.com/gpu", config)
        return GpuCounting()


def tenant_pools(tenant: Mapping[str, Any]) -> list[NodePool] | None:
    """The pools of a Tenant object (spec.placement.nodePools); None when they do not parse."""
    placement = (tenant.get("spec") or {}).get("placement") or {}
    try:
        return Placement.model_validate(placement).node_pools
    except ValidationError:
        return None


def label_selector(node_selector: Mapping[str, str]) -> str:
    """A nodeSelector as a list's labelSelector: `k1=v1,k2=v2` (label values hold no `,` or `=`)."""
    return ",".join(f"{key}={value}" for key, value in sorted(node_selector.items()))


class PoolNodes:
    """What the nodes a Tenant's pools select hold per model, read from the API on each call."""

    def __init__(self, kube: KubeApi, counting: GpuCounting, *, timeout: float = LIST_TIMEOUT_SECONDS):
        self._kube = kube
        self._counting = counting
        self._timeout = timeout

    def capacity_of(self, tenant: Mapping[str, Any]) -> PoolCapacityDocument | None:
        """{model: {gpus, nodes, largestNode}} of the nodes the Tenant's pools select; None, without
        reading, when labgate cannot tell (no pools, a pool selecting any node: see pool_capacity).
        Raises when the API cannot say."""
        pools = tenant_pools(tenant)
        if not pools or any(not pool.node_selector for pool in pools):
            return None
        capacity = pool_capacity(pools, self._nodes(pools))
        return None if capacity is None else capacity_document(capacity)

    def _nodes(self, pools: Sequence[NodePool]) -> list[NodeGpus]:
        """The nodes with GPUs some pool selects, each once."""
        nodes: dict[str, NodeGpus] = {}
        for selector in sorted({label_selector(pool.node_selector) for pool in pools}):
            listed = self._kube.list(NODE, label_selector=selector, timeout=self._timeout)
            for obj in listed.get("items") or []:
                if (node := node_gpus(obj, self._counting)) is not None:
                    nodes[node.name] = node
        return list(nodes.values())
