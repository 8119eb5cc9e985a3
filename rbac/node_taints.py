"""Which nodes a pod without tolerations can land on (pure): the cluster's Ready, schedulable nodes
without a NoSchedule or NoExecute taint, and the taint keys that keep the others.

labgate places only GPU pods on a tenant's pools (it adds their tolerations); a pod without GPUs
keeps the tolerations it asks. Where every node is tainted (a cluster of tainted GPU pools and no
untainted pool for pods without GPUs) such a pod pends for ever, and the researcher learns it from
the scheduler's event, not at apply. The reconciler summarises every node it watches
(`node_taints`), sums them (`open_nodes`) into each Tenant's status (status.nodes: the same for
every tenant, since the fact is the cluster's), and the policies read it back
(placement-no-untainted-node warns a pod without GPUs that tolerates none of those keys).

A node that is not Ready or is cordoned takes no pod at all: it counts neither way. At most
MAX_TAINT_KEYS keys are named, the rest counted (moreTaintKeys): a policy that cannot see every key
says nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# The effects that keep a pod off a node; PreferNoSchedule only discourages.
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
MAX_TAINT_KEYS = 10


@dataclass(frozen=True, slots=True)
class NodeTaints:
    """One node as a pod without tolerations sees it: whether it takes pods at all (Ready, not
    cordoned) and the keys of its NoSchedule and NoExecute taints."""

    takes_pods: bool
    keys: frozenset[str]


def _is_ready(status: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
        if isinstance(c, Mapping)
    )


def node_taints(node: Mapping[str, Any]) -> NodeTaints:
    """The node's summary: Ready and not cordoned, and its blocking taints' keys."""
    spec = node.get("spec") or {}
    keys = frozenset(
        str(taint.get("key", ""))
        for taint in spec.get("taints") or []
        if isinstance(taint, Mapping) and taint.get("effect") in BLOCKING_EFFECTS
    )
    takes_pods = _is_ready(node.get("status") or {}) and not spec.get("unschedulable")
    return NodeTaints(takes_pods=takes_pods, keys=keys)


def open_nodes(nodes: Iterable[NodeTaints]) -> dict[str, Any]:
    """status.nodes: {untainted, tainted, taintKeys (sorted, the first MAX_TAINT_KEYS; left out
    when none), moreTaintKeys (only when some are left out)} of the nodes that take pods."""
    taking = [node for node in nodes if node.takes_pods]
    tainted = [node for node in taking if node.keys]
    keys = sorted(set().union(*(node.keys for node in tainted)))
    more = len(keys) - MAX_TAINT_KEYS
    return {
        "untainted": len(taking) - len(tainted),
        "tainted": len(tainted),
        **({"taintKeys": keys[:MAX_TAINT_KEYS]} if keys else {}),
        **({"moreTaintKeys": more} if more > 0 else {}),
    }
